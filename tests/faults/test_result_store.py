"""Per-call results survive backend faults: a lost reply on the result backend's GET (the read
Celery's Redis backend does before its SET, and does not retry) is tried again, so the waiter
gets its result; and a backend that is down is waited on once per outage, not once per call
(a drain of many calls would otherwise wait out the patience on every call). Celery's Redis
backend calls connection errors safe to retry only from 5.5 on: the oldest supported (5.3) must
get the same."""

import uuid

import pytest
from celery import Celery, states

from celery_redqueue.tasks import results

pytestmark = pytest.mark.timeout(120)


def _body():
    return None


def _app(url, always_retry=False):
    app = Celery("result_store", broker="memory://", backend=url, set_as_current=False)
    app.conf.result_backend_always_retry = always_retry
    return app


# With Celery's own retry loop on, what it does not try again (a lost reply, on Celery before
# 5.5) is tried again here.
@pytest.mark.parametrize("always_retry", [False, True], ids=["ours", "celery-always-retry"])
def test_a_lost_get_reply_is_tried_again(reply_proxy, redqueue_server_url, always_retry):
    app = _app(reply_proxy.url, always_retry)
    task = app.task(name="result_store.body")(_body)
    call_id = f"result-store-{uuid.uuid4().hex}"
    reply_proxy.drop(b"GET", count=1)
    results.store_success(task, call_id, 42)
    assert reply_proxy.dropped == 1  # the fault happened: the store's GET reply was lost
    direct = _app(redqueue_server_url)
    meta = direct.backend.get_task_meta(call_id)
    assert (meta["status"], meta["result"]) == (states.SUCCESS, 42)


def test_a_dead_backend_is_waited_on_once_not_per_call(broker_server, monkeypatch):
    monkeypatch.setattr(results, "STORE_PATIENCE", 1.0)
    monkeypatch.setattr(results, "_backend_down", False)
    app = _app(broker_server.url)
    task = app.task(name="result_store.body")(_body)
    tries: list[str] = []

    def store(call_id):
        tries.append(call_id)
        task.backend.store_result(call_id, 1, states.SUCCESS)

    def storing(call_id):
        results._storing(task, call_id, lambda: store(call_id))

    storing("warm")  # the backend's connection is made while it is up
    broker_server.stop()
    tries.clear()
    storing("first")
    assert tries.count("first") > 1  # waited on, tried again
    for n in range(3):
        storing(f"later-{n}")
    assert [tries.count(f"later-{n}") for n in range(3)] == [1, 1, 1]
    broker_server.start()
    storing("back")  # one success ends the outage: the next fault is waited on again
    assert results._backend_down is False
    assert task.backend.get_task_meta("back")["status"] == states.SUCCESS

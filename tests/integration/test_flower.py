"""Flower's task endpoints (a real Flower process, its HTTP API) on pooled and bucket tasks:
apply and async-apply answer 200 and store the call once; send-task is stored by the worker."""

import json
import socket
import urllib.error
import urllib.request

import pytest

pytest.importorskip("flower")

APP = "tests.integration.call_paths_app"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def flower(celery_procs, wait_for):
    port = free_port()
    proc = celery_procs(
        APP,
        "flower",
        f"--port={port}",
        "--address=127.0.0.1",
        env={"FLOWER_UNAUTHENTICATED_API": "true"},
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        assert proc.poll() is None, proc.log_path.read_text()
        try:
            urllib.request.urlopen(f"{base}/healthcheck", timeout=2)
        except OSError:
            return False
        return True

    wait_for(up, timeout=60, interval=0.2, message="flower listening")
    return base


@pytest.fixture
def worker(celery_procs):
    return celery_procs(APP, "worker", "--pool=solo", "--loglevel=INFO", "--without-heartbeat")


def post(base, path, body):
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def ran(redqueue_redis, redqueue_prefix):
    return [r.decode() for r in redqueue_redis.lrange(f"{redqueue_prefix}:ran", 0, -1)]


def test_async_apply_answers_200_with_the_receipts_id_and_stores_the_call_once(
    flower, worker, redqueue_redis, redqueue_prefix, wait_for
):
    status, body = post(flower, "/api/task/async-apply/call_paths_app.record", {"args": [1]})
    assert status == 200, body
    assert body["task-id"]
    wait_for(lambda: ran(redqueue_redis, redqueue_prefix) == ["record:1"], message="ran once")
    offered = redqueue_redis.hget(
        f"{redqueue_prefix}:{{pool:call_paths_app.record}}:stats", "offered+accepted+depth"
    )
    assert int(offered) == 1


def test_apply_waits_for_the_bodys_result_when_results_are_on(
    flower, worker, redqueue_redis, redqueue_prefix
):
    status, body = post(flower, "/api/task/apply/call_paths_app.square", {"args": [7]})
    assert status == 200, body
    assert (body["result"], body["state"]) == (49, "SUCCESS")
    status, body = post(flower, "/api/task/apply/call_paths_app.square", {"args": [-1]})
    assert status == 200, body
    assert body["state"] == "FAILURE" and "no square of -1" in json.dumps(body["result"])
    assert ran(redqueue_redis, redqueue_prefix) == ["square:7", "square:-1"]


def test_apply_without_results_answers_200_at_once(flower, redqueue_redis, redqueue_prefix):
    """No worker runs: with results off there is nothing to wait for, and the call is stored."""
    status, body = post(flower, "/api/task/apply/call_paths_app.record", {"args": [3]})
    assert status == 200, body
    assert body["task-id"] and body["result"] is None
    depth = redqueue_redis.zcard(f"{redqueue_prefix}:{{pool:call_paths_app.record}}:items")
    assert depth == 1


def test_send_task_is_stored_by_the_worker_and_its_result_read_by_id(
    flower, worker, redqueue_redis, redqueue_prefix, wait_for
):
    status, body = post(flower, "/api/task/send-task/call_paths_app.notify", {"args": ["acme", 9]})
    assert status == 200, body
    task_id = body["task-id"]

    def result():
        with urllib.request.urlopen(f"{flower}/api/task/result/{task_id}", timeout=10) as r:
            answer = json.loads(r.read())
        return answer if answer.get("state") == "SUCCESS" else None

    answer = wait_for(result, timeout=60, interval=0.2, message="the body's result")
    assert answer["result"] == "acme:9"
    assert ran(redqueue_redis, redqueue_prefix) == ["notify:9"]

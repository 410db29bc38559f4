"""A Celery app of plain ``@app.task`` tasks made unique (`celery_redqueue.unique`), for tests
that run real `celery worker` subprocesses. Bodies record into Redis: how many of a key run at
once (``active``, the largest seen in ``most``), and what ran."""

import os
import time

from celery_redqueue import unique
from tests.process_app import PREFIX, client, make_app

app = make_app("unique_app")


def _body(name, i):
    r = client()
    now = r.incr(f"{PREFIX}:{name}:active")
    r.eval(
        "if tonumber(ARGV[1]) > tonumber(redis.call('get', KEYS[1]) or '0') then "
        "redis.call('set', KEYS[1], ARGV[1]) end",
        1,
        f"{PREFIX}:{name}:most",
        now,
    )
    r.rpush(f"{PREFIX}:{name}:ran", f"{os.getpid()}:{i}")
    time.sleep(0.05)
    r.decr(f"{PREFIX}:{name}:active")


@unique(key=lambda i: "one", mode="running", ttl=10)
@app.task
def running(i):
    _body("running", i)


@unique(key=lambda i: "one", mode="until_done", ttl=10)
@app.task
def until_done(i):
    _body("until_done", i)


@unique(key=["job"], mode="until_done", ttl=3)
@app.task(acks_late=True)
def hang(job):
    """Its first run never finishes: the test SIGKILLs its worker process inside it."""
    r = client()
    r.rpush(f"{PREFIX}:hang:started", f"{os.getpid()}:{hang.request.id}")
    if r.incr(f"{PREFIX}:hang:runs") == 1:
        time.sleep(600)
    r.rpush(f"{PREFIX}:hang:done", hang.request.id)


@unique(key=["account"], mode="queued", ttl=10)
@app.task
def refresh(account, n):
    """Keyed by ``account`` only: calls differing in ``n`` are duplicates."""
    client().rpush(f"{PREFIX}:refresh:ran", f"{account}:{n}")


def _retry_once(task, name, countdown):
    """Publish the retry, then keep running a moment (``throw=False``): the retry's message may
    be received while this body has not ended yet. The retry's body waits for the test's go."""
    r = client()
    r.rpush(f"{PREFIX}:{name}:runs", f"{task.request.id}:{task.request.retries}")
    if task.request.retries == 0:
        retry = task.retry(countdown=countdown, throw=False)
        r.rpush(f"{PREFIX}:{name}:published", task.request.id)
        time.sleep(0.5)
        raise retry
    r.blpop(f"{PREFIX}:{name}:go", timeout=60)
    r.rpush(f"{PREFIX}:{name}:done", task.request.id)


@unique(key=["job"], mode="until_done", ttl=10)
@app.task(bind=True)
def retry_until_done(self, job):
    _retry_once(self, "retry_until_done", countdown=2)


@unique(key=["job"], mode="queued", ttl=10)
@app.task(bind=True)
def retry_queued(self, job):
    _retry_once(self, "retry_queued", countdown=5)


@unique(key=["job"], mode="running", ttl=10)
@app.task(bind=True)
def retry_running(self, job):
    _retry_once(self, "retry_running", countdown=0)


@unique(key=["job"], mode="running", ttl=3)
@app.task(acks_late=True)
def hang_running(job):
    """Records its pid and its lock's fencing token; its first run never finishes (the test
    SIGKILLs its worker)."""
    r = client()
    lease = hang_running.unique_lease()
    r.rpush(f"{PREFIX}:hang_running:started", f"{os.getpid()}:{lease.fence}")
    if r.incr(f"{PREFIX}:hang_running:runs") == 1:
        time.sleep(600)
    r.rpush(f"{PREFIX}:hang_running:done", hang_running.request.id)

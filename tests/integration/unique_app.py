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

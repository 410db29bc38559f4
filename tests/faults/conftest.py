"""Fixtures of the fault suite: real workers (in-process and `celery worker` subprocesses), a
broker that can be stopped and started again on the same port, and the accounting identities.
Everything runs on loopback; every wait is bounded."""

import contextlib
import functools
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu.asynchronous import set_event_loop

from celery_redqueue.embedded import die_with_parent, find_server_binary
from celery_redqueue.testing import celery_test_config
from tests.conftest import _wait_for  # the root conftest's wait_for fixture serves tests

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def app(redqueue_celery_app):
    """The test's app, with beat off (no safety net: calls alone must get drains sent)."""
    redqueue_celery_app.task = functools.partial(redqueue_celery_app.task, shared=False)
    redqueue_celery_app.conf.redqueue_beat = False
    return redqueue_celery_app


@pytest.fixture
def worker():
    """Start Celery's in-process test worker: ``with worker(app): ...``."""

    @contextlib.contextmanager
    def run(app, **options):
        options.setdefault("pool", "solo")
        options.setdefault("perform_ping_check", False)
        options.setdefault("loglevel", "WARNING")
        # kombu before 5.6.1 (celery/kombu#2404) leaves a stopped worker's closed hub as the
        # process's event loop, and the next worker adopts it: that hub runs the old worker's
        # timer, so the new worker's countdown and ETA messages would never run.
        set_event_loop(None)
        with start_worker(app, **options) as started:
            yield started

    return run


@pytest.fixture
def ended_jobs():
    """The names of the tasks whose jobs an in-process worker ended (``task_postrun``: failed
    or not) during the test, in order: a drain job is its task's name."""
    from celery.signals import task_postrun

    ended = []

    def on_postrun(sender=None, **kwargs):
        ended.append(sender.name)

    task_postrun.connect(on_postrun, weak=False)
    yield ended
    task_postrun.disconnect(on_postrun)


def pool_identities_hold(stats):
    return stats.offered == stats.accepted + stats.rejected and stats.accepted == (
        stats.processed
        + stats.failed
        + stats.evicted
        + stats.depth
        + stats.in_flight
        + stats.lost
        + stats.dead
        + stats.purged
    )


def bucket_identity_holds(stats):
    # The CLI's identity: a requeued dead letter moves from dead to depth, enqueued stays.
    return stats.enqueued == (
        stats.depth + stats.in_flight + stats.processed + stats.dead + stats.evicted + stats.purged
    )


@pytest.fixture
def identities():
    """Checks of the accounting identities (pools: two; buckets: one)."""
    return {"pool": pool_identities_hold, "bucket": bucket_identity_holds}


class StoppableRedis:
    """A redis-server on a fixed loopback port that can be stopped and started again, as a
    broker that goes down and comes back."""

    def __init__(self, appendonly=False):
        self.appendonly = appendonly
        self.binary = find_server_binary()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = tempfile.TemporaryDirectory(prefix="redqueue-broker-")
        self.process = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", self.dir.name, "--save", "", "--appendonly"]
        args += ["yes" if self.appendonly else "no"]
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),  # a killed run leaves no server behind
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        try:
            _wait_for(lambda: self._ping(client), timeout=20, message="the broker to start")
        finally:
            client.close()

    @staticmethod
    def _ping(client):
        try:
            return client.ping()
        except redis.exceptions.ConnectionError:
            return False

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def broker_server():
    """A broker (redis-server) of the test's own, running; ``.stop()`` / ``.start()``."""
    server = StoppableRedis()
    server.start()
    yield server
    server.stop()
    server.dir.cleanup()


@pytest.fixture
def data_server():
    """A Redis of the test's own for the structures, with AOF on (it keeps its data across a
    restart, so what a dead drain left behind is still there when it comes back)."""
    server = StoppableRedis(appendonly=True)
    server.start()
    yield server
    server.stop()
    server.dir.cleanup()


@pytest.fixture
def data_app(redqueue_server_url, redqueue_prefix, data_server):
    """An app whose structures live on ``data_server``; its broker stays on the test Redis."""
    app = Celery(f"redqueue-data-{redqueue_prefix}", set_as_current=False)
    app.conf.update(celery_test_config(redqueue_server_url, redqueue_prefix))
    app.conf.redqueue_url = data_server.url
    app.conf.redqueue_beat = False
    app.task = functools.partial(app.task, shared=False)
    yield app
    app.close()


@pytest.fixture
def split_app(redqueue_server_url, redqueue_prefix, broker_server):
    """An app whose broker is ``broker_server`` while its structures stay on the test Redis."""
    app = Celery(f"redqueue-fault-{redqueue_prefix}", set_as_current=False)
    app.conf.update(celery_test_config(redqueue_server_url, redqueue_prefix))
    app.conf.broker_url = broker_server.url
    app.conf.redqueue_beat = False
    # Keep the failing publish short: the default retries take a few seconds too.
    app.conf.task_publish_retry_policy = {"max_retries": 1, "interval_start": 0}
    app.conf.broker_connection_timeout = 2
    app.task = functools.partial(app.task, shared=False)
    yield app
    app.close()


@pytest.fixture
def spawn_worker(celery_procs):
    """Start `celery -A tests.faults.fault_app worker` subprocesses (stopped at teardown)."""
    return functools.partial(celery_procs, "tests.faults.fault_app", "worker")


@pytest.fixture
def worker_logs(tmp_path):
    """The subprocess workers' logs (printed when a test fails, to see why)."""

    def read():
        return "\n".join(f"{p.name}:\n{p.read_text()[-4000:]}" for p in tmp_path.glob("*.log"))

    return read


def _imported(module_name, url, prefix, monkeypatch):
    """Import ``module_name`` (a process app) in this process, as a producer on the test's
    server and prefix; yields the module and closes its app afterwards."""
    import importlib

    monkeypatch.setenv("REDQUEUE_TEST_URL", url)
    monkeypatch.setenv("REDQUEUE_TEST_PREFIX", prefix)
    for name in (module_name, "tests.process_app"):  # read the environment afresh
        sys.modules.pop(name, None)
    module = importlib.import_module(module_name)
    yield module
    module.app.close()
    sys.modules.pop(module_name, None)


@pytest.fixture
def fault_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    """tests.faults.fault_app imported in this process, on the test's prefix (as a producer)."""
    yield from _imported(
        "tests.faults.fault_app", redqueue_server_url, redqueue_prefix, monkeypatch
    )


@pytest.fixture
def recovery_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    """tests.faults.recovery_app imported in this process, on the test's prefix (as a producer)."""
    yield from _imported(
        "tests.faults.recovery_app", redqueue_server_url, redqueue_prefix, monkeypatch
    )


@pytest.fixture
def reply_proxy(redqueue_server_url):
    """A `tests.support.proxy.ReplyDroppingProxy` in front of the test
    server: ``reply_proxy.drop(marker)`` loses the next reply to a command containing it."""
    from urllib.parse import urlparse

    from tests.support.proxy import ReplyDroppingProxy

    parsed = urlparse(redqueue_server_url)
    with ReplyDroppingProxy((parsed.hostname, parsed.port)) as proxy:
        yield proxy


@pytest.fixture
def retrying_client(reply_proxy):
    """A client through the proxy that retries everything redis-py can retry (as a user's
    ``redqueue_redis_options`` may configure): five retries on connection errors and timeouts,
    no backoff. Nothing of the package may be re-sent by it."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis.from_url(
        reply_proxy.url,
        retry=Retry(NoBackoff(), 5),
        retry_on_error=[redis.exceptions.ConnectionError, redis.exceptions.TimeoutError],
        socket_timeout=5,
    )
    yield client
    client.close()


@pytest.fixture
def neighbour_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    """tests.faults.neighbour_app imported in this process, on the test's prefix (as a producer)."""
    yield from _imported(
        "tests.faults.neighbour_app", redqueue_server_url, redqueue_prefix, monkeypatch
    )

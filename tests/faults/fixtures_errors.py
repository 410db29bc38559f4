"""Fixtures for the error-contract fault tests: Redis servers of their own (stalled, full,
restarted), so no fault reaches the session's shared server. Loaded by the ``test_errors_*``
modules through ``pytest_plugins``."""

import contextlib
import logging
import os
import signal
import uuid

import pytest
import redis
from celery import Celery

from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.testing import celery_test_config


@pytest.fixture
def fault_server():
    """Start a private redis-server: ``fault_server(appendonly=True, maxmemory=...)``.

    Each is stopped at teardown (resumed first if a test left it SIGSTOPped).
    """
    servers = []

    def start(**options):
        server = EmbeddedRedis(**options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


@pytest.fixture
def fault_redis(fault_server):
    """A private server and a plain client of it (no package defaults)."""
    server = fault_server()
    client = redis.Redis.from_url(server.url, socket_timeout=10)
    yield server, client
    client.close()


@pytest.fixture
def stopped():
    """``with stopped(server):`` SIGSTOPs the server for the block: it keeps accepting
    connections (the kernel does) and never answers."""

    @contextlib.contextmanager
    def stop(server):
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(server.process.pid, signal.SIGCONT)

    return stop


@pytest.fixture
def fill_redis():
    """``fill_redis(client)``: 1 MB of filler, then maxmemory set below what is used, so every
    write is refused (noeviction) until ``config_set("maxmemory", 0)``, whatever the allocator
    does meanwhile."""

    def fill(client):
        pipe = client.pipeline(transaction=False)
        for i in range(1000):
            pipe.set(f"filler:{i}", b"x" * 1000)
        pipe.execute()
        # 1 MiB: below the filler and the server's own memory together, however much of what
        # used_memory counted a moment ago (the pipeline's query buffer, freed by the server's
        # cron) has gone meanwhile. A limit of "used minus a little" was sometimes above what
        # remained once that buffer was freed, and writes went through.
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 1024 * 1024)

    return fill


@pytest.fixture
def make_app():
    """A Celery app on a given server URL with its own prefix: ``make_app(url, **conf)``."""
    apps = []

    def make(url, **conf):
        prefix = f"rqfault:{uuid.uuid4().hex[:10]}"
        app = Celery(f"redqueue-fault-{prefix}", set_as_current=False)
        app.conf.update(celery_test_config(url, prefix))
        app.conf.update(conf)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


class Records(logging.Handler):
    """Collects log records of one logger (caplog misses records of some threads' loggers)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def messages(self):
        return [r.getMessage() for r in self.records]


@pytest.fixture
def log_records():
    """``log_records("celery_redqueue.tasks.beat")`` -> a handler collecting that logger."""
    attached = []

    def attach(name):
        handler = Records()
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        old_level = logger.level
        logger.setLevel(logging.DEBUG)
        attached.append((logger, handler, old_level))
        return handler

    yield attach
    for logger, handler, level in attached:
        logger.removeHandler(handler)
        logger.setLevel(level)

"""Fixtures for the operator tools: a dashboard served on a loopback port, a real Chromium."""

import functools
import threading

import pytest

from celery_redqueue.ops.dashboard import Dashboard, make_dashboard_server
from celery_redqueue.ops.reading import Operations
from tests.integration.conftest import running_worker  # noqa: F401 (a fixture)

from .browser import Browser, find_chromium

TOKEN = "s3cret-dashboard-token"


@pytest.fixture
def app(redqueue_celery_app):
    """The test's app, its tasks not shared with other tests' apps."""
    redqueue_celery_app.task = functools.partial(redqueue_celery_app.task, shared=False)
    return redqueue_celery_app


@pytest.fixture
def serve():
    """Serve a Dashboard on 127.0.0.1 (a free port) for the test; returns its base URL."""
    servers = []

    def start(dashboard):
        server = make_dashboard_server(dashboard, "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def dashboard(app, serve):
    """The test app's dashboard with a token; yields (base URL, Dashboard)."""
    board = Dashboard(Operations.from_app(app), token=TOKEN, refresh=0.5)
    return serve(board), board


@pytest.fixture(scope="session")
def chromium():
    path = find_chromium()
    if path is None:
        pytest.skip(
            "no Chromium on this machine (install Debian's chromium package, as .ci/run does): "
            "the dashboard's browser tests need a real browser"
        )
    return path


@pytest.fixture
def browser(chromium, tmp_path):
    started = Browser(chromium, tmp_path / "chromium-profile", tmp_path)
    yield started
    started.close()

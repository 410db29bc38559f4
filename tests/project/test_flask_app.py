"""example_project/flask_app: the Flask docs' setup, driven through Flask's test client with a
real worker draining the pooled and bucket tasks."""

import pytest
from celery import _state

from celery_redqueue.testing import celery_test_config
from example_project.flask_app import create_app

from .conftest import running_worker


@pytest.fixture
def flask_app(redqueue_server_url, redqueue_prefix):
    default = _state.default_app  # celery_init_app makes its app the default: put it back after
    app = create_app(
        {
            "CELERY": celery_test_config(redqueue_server_url, redqueue_prefix),
            "HITS_KEY": f"{redqueue_prefix}:hits",
            "FETCHED_KEY": f"{redqueue_prefix}:fetched",
        }
    )
    yield app
    app.extensions["celery"].close()
    _state.default_app = default


def test_pages_store_calls_and_a_worker_runs_them_in_the_app_context(flask_app, wait_for):
    client = flask_app.test_client()
    celery_app = flask_app.extensions["celery"]
    with running_worker(celery_app):
        for i in range(30):
            reply = client.get(f"/page/p{i % 3}")
            assert reply.status_code == 200 and reply.json["kept"]
        for domain in ("a.example", "b.example", "a.example"):
            assert client.post(f"/feeds/{domain}").json["kept"]

        def settled():
            stats = client.get("/stats").json
            return sum(stats["hits"].values()) == 30 and len(stats["fetched"]) == 3 and stats

        stats = wait_for(settled, message="30 hits counted and 3 feeds fetched")
    assert stats["hits"] == {"p0": 10, "p1": 10, "p2": 10}
    assert sorted(stats["fetched"]) == ["a.example/feed.xml"] * 2 + ["b.example/feed.xml"]
    assert stats["pool"]["failed"] == 0
    assert stats["bucket"]["processed"] == 3

import functools
import subprocess
import sys
from pathlib import Path

import pytest
from celery import Celery, Task
from flask import Flask, g

from celery_redqueue.testing import celery_test_config
from tests.integration.conftest import app, running_worker  # noqa: F401 (shared fixtures)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def run_demo():
    """``run_demo(module, *args, timeout=240)``: run ``python -m example_project.<module>``
    from the repository's top (as ``./run-demo`` does) to its end; returns the completed
    process, its output as text."""

    def run(module, *args, timeout=240):
        return subprocess.run(
            [sys.executable, "-m", f"example_project.{module}", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


def flask_task_cls(flask_app):
    """The Flask docs' FlaskTask: every call runs inside a fresh app context."""

    class FlaskTask(Task):
        def __call__(self, *args, **kwargs):
            with flask_app.app_context():
                return self.run(*args, **kwargs)

    return FlaskTask


@pytest.fixture
def flask_celery(redqueue_server_url, redqueue_prefix):
    """A Celery app set up as the Flask docs do (task_cls=FlaskTask), on the test's prefix."""
    flask_app = Flask("redqueue-test")
    celery = Celery("flask-test", task_cls=flask_task_cls(flask_app), set_as_current=False)
    celery.conf.update(celery_test_config(redqueue_server_url, redqueue_prefix))
    celery.task = functools.partial(celery.task, shared=False)
    celery.flask_app = flask_app
    yield celery
    celery.close()


def in_fresh_app_context(seen):
    """What a body records: it runs in an app context, one of its own (g starts empty)."""
    assert not hasattr(g, "redqueue_seen"), "an app context was shared between calls"
    g.redqueue_seen = True
    seen.append(id(g._get_current_object()))

"""A Flask app on Celery the way the Flask docs set it up ("Background Tasks with Celery"), with a
pooled task and a rate-limited bucket task from celery-redqueue.

Run it with ``./run-demo flask``; or by hand, with Redis on localhost::

    flask --app example_project.flask_app run
    celery -A example_project.flask_app.make_celery worker --loglevel INFO

Settings come from ``FLASK_*`` environment variables (``app.config.from_prefixed_env()``), e.g.
``FLASK_CELERY__broker_url=redis://localhost:6379/1``.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, Task
from flask import Flask

REDIS_URL = "redis://localhost:6379/0"


def celery_init_app(app: Flask) -> Celery:
    """The Flask docs' function, unchanged: every task body runs inside the app context."""

    class FlaskTask(Task):
        def __call__(self, *args: object, **kwargs: object) -> object:
            with app.app_context():
                return self.run(*args, **kwargs)

    celery_app = Celery(app.name, task_cls=FlaskTask)
    celery_app.config_from_object(app.config["CELERY"])
    celery_app.set_default()
    app.extensions["celery"] = celery_app
    return celery_app


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.from_mapping(
        CELERY={
            "broker_url": REDIS_URL,
            "task_ignore_result": True,
            # celery-redqueue's settings sit beside Celery's (redqueue_url defaults to the broker).
            "redqueue_key_prefix": "flaskdemo",
        },
        # What the task bodies read through current_app: they need the app context.
        HITS_KEY="flaskdemo:hits",
        FETCHED_KEY="flaskdemo:fetched",
    )
    app.config.from_prefixed_env()
    if test_config:
        for key, value in test_config.items():
            if isinstance(value, dict) and isinstance(app.config.get(key), dict):
                app.config[key].update(value)
            else:
                app.config[key] = value
    celery_init_app(app)

    from . import views

    app.register_blueprint(views.bp)
    return app

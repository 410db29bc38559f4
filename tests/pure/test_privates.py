"""What `celery_redqueue.privates` reads of Celery, kombu and redis-py is there, and behaves as
the package expects, on the installed releases (nox runs this on the oldest and the newest
supported); and no other module of the package reaches such a private itself. No Redis server
(the redis-py one is tests/unit/test_privates_redis.py)."""

import re
from pathlib import Path

import pytest
from celery import Celery

import celery_redqueue
from celery_redqueue import privates

PACKAGE = Path(celery_redqueue.__file__).parent

#: Underscore names of other libraries the package once reached for, and Celery's private module.
FOREIGN_PRIVATES = re.compile(
    r"celery\._state|_get_active_apps|_finalize_mutex|_get_exec_options|__header__|_orig_run"
    r"|\._sock\b|_encoders|conf\._key|_to_keys|_redqueue_config|app\._redqueue_leases"
)


def test_no_module_but_privates_reaches_another_librarys_private():
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "privates.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if FOREIGN_PRIVATES.search(line)
    ]
    assert found == []


def test_active_apps_and_the_finalize_hook_and_lock():
    seen = []
    privates.on_app_finalize(lambda app: seen.append(app))
    app = Celery("privates", set_as_current=False)
    # Finalizing adds every shared task of the session (other tests' redqueue tasks too), which
    # need a Redis URL to be declared; nothing connects to it.
    app.conf.redqueue_url = "redis://127.0.0.1:1/0"
    assert app in list(privates.active_apps())
    app.finalize()
    assert app in seen
    with privates.finalize_lock(app):  # a lock, held by no one else
        pass
    assert hasattr(privates.finalize_lock(app), "acquire")
    app.close()


def test_exec_options_check_arguments_and_the_undecorated_body():
    app = Celery("privates", set_as_current=False)

    @app.task(shared=False, queue="slow", autoretry_for=(ValueError,))
    def body(x, y=1):
        return x + y

    options = privates.exec_options(body)
    assert isinstance(options, dict) and options["queue"] == "slow"
    privates.check_arguments(body, (1,), {"y": 2})
    with pytest.raises(TypeError):
        privates.check_arguments(body, (), {"z": 1})
    # autoretry_for wraps run; the original is the body itself.
    assert privates.undecorated_body(body) is not body.run
    assert privates.undecorated_body(body)(1, y=2) == 3

    @app.task(shared=False)
    def plain(x):
        return x

    assert privates.undecorated_body(plain) == plain.run
    app.close()


def test_push_request_of_calls_keeps_the_calls_own_request():
    app = Celery("privates", set_as_current=False)

    class Pushing(app.Task):
        push_request = privates.push_request_of_calls()

        def __call__(self, *args, **kwargs):  # a custom __call__: apply() runs it
            return super().__call__(*args, **kwargs)

    @app.task(base=Pushing, bind=True, shared=False, max_retries=1)
    def body(self, x):
        if not self.request.retries:
            raise self.retry(countdown=1)
        return self.request.id, self.request.retries, list(self.request.args), self.request.is_eager

    # An eager run's retry runs it again, under the same id, as the second try.
    assert body.apply((7,), task_id="t-1").get() == ("t-1", 1, [7], True)
    app.close()

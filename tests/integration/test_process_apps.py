"""The process apps the test process imports keep their tasks to themselves: with Celery's
default (``shared=True``) every later app of the session would bind them too, and a Flask app
(task_cls=FlaskTask) would warn about each one (tests/project/test_composition.py)."""

import pytest
from celery import Celery

from tests.faults.conftest import _imported

#: Process apps a test imports in the test process (as a producer), besides its workers.
IMPORTED = [
    "tests.integration.consumer_app",
    "tests.integration.wake_app",
    "tests.faults.fault_app",
    "tests.faults.recovery_app",
    "tests.faults.poison_app",
]


@pytest.mark.parametrize("module_name", IMPORTED)
def test_a_later_app_binds_none_of_an_imported_apps_tasks(
    module_name, redqueue_server_url, redqueue_prefix, monkeypatch
):
    imported = _imported(module_name, redqueue_server_url, redqueue_prefix, monkeypatch)
    module = next(imported)
    assert [name for name in module.app.tasks if name.startswith(module_name)]
    later = Celery("later", set_as_current=False)
    later.conf.redqueue_url = redqueue_server_url
    try:
        later.finalize()
        assert [name for name in later.tasks if name.startswith(module_name)] == []
    finally:
        later.close()
        next(imported, None)

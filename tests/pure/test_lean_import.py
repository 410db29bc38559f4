"""``import celery_redqueue`` is lean: the public names load on first use, and a producer never
loads the worker-only modules (continuous consumer, watchdog, tracing), the operator tools or
the embedded server. Each check runs in a fresh interpreter. No Redis needed."""

import json
import subprocess
import sys

import celery_redqueue

#: Modules only a worker (or an operator, or a test) needs.
WORKER_ONLY = (
    "celery_redqueue.tasks.consumer",
    "celery_redqueue.tasks.consumer_loop",
    "celery_redqueue.tasks.wake_wait",
    "celery_redqueue.tasks.watchdog",
    "celery_redqueue.tasks.tracing",
    "celery_redqueue.ops",
    "celery_redqueue.embedded",
    "celery_redqueue.embedded_sentinel",
    "celery_redqueue.testing",
)


def _modules_after(code: str) -> list[str]:
    """The modules loaded in a fresh interpreter (no pytest plugin) after running ``code``."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.splitlines()[-1])


def _loaded(modules, names):
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def test_import_loads_the_errors_only():
    modules = _modules_after("import celery_redqueue")
    ours = [m for m in modules if m.startswith("celery_redqueue")]
    assert ours == ["celery_redqueue", "celery_redqueue.errors"]
    assert _loaded(modules, ["celery", "kombu", "redis"]) == []


def test_every_public_name_loads_no_worker_only_module():
    modules = _modules_after("import celery_redqueue as r\nfor n in r.__all__: getattr(r, n)")
    assert "celery_redqueue.tasks.pool" in modules  # the names did load
    assert _loaded(modules, WORKER_ONLY) == []


def test_a_structure_alone_loads_no_celery():
    modules = _modules_after("from celery_redqueue import CappedPool, LeakyBucket")
    # kombu is there: its serializer registry encodes the payloads.
    assert _loaded(modules, ["celery", "celery_redqueue.tasks"]) == []


def test_every_public_name_resolves_to_its_module_object():
    lazy = celery_redqueue._LAZY
    assert set(celery_redqueue.__all__) - {"__version__"} >= set(lazy)
    for name in celery_redqueue.__all__:
        value = getattr(celery_redqueue, name)
        if name in lazy:
            module = sys.modules[f"celery_redqueue{lazy[name]}"]
            assert getattr(module, name) is value
    assert set(celery_redqueue.__all__) <= set(dir(celery_redqueue))


def test_an_unknown_name_is_an_attribute_error():
    try:
        celery_redqueue.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_a_worker_still_gets_the_consumer_and_watchdog_steps():
    """The steps are added by the package's ``celeryd_init`` receiver, which imports their
    modules in the worker only."""
    code = """
from types import SimpleNamespace
from celery import Celery
from celery.signals import celeryd_init
import celery_redqueue
celery_redqueue.PoolTask
app = Celery("lean", set_as_current=False)
before = "celery_redqueue.tasks.consumer" in sys.modules
celeryd_init.send(sender="w@lean", instance=SimpleNamespace(app=app), conf=app.conf, options={})
print(json.dumps([before, sorted(s.__name__ for s in app.steps["worker"])]))
"""
    out = subprocess.run(
        [sys.executable, "-c", "import json, sys\n" + code],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    before, steps = json.loads(out.splitlines()[-1])
    assert before is False
    assert steps == ["ConsumerStep", "NeighbourStep", "WatchdogStep"]

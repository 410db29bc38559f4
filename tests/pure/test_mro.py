"""No public class of the package is a lattice of mixins: at most 4 package classes in its MRO
(issue 31). A reader of `PoolTask` opens `tasks/pool.py`, `tasks/producing.py` and
`tasks/base.py`, not a chain of cooperative bases calling what only a subclass defines. No
Redis needed."""

import inspect

import celery_redqueue
from celery_redqueue import tasks

MOST = 4
#: Classes still over the bound, with their count today: none may be added, and a count may
#: only go down (take the entry off once the class is within the bound).
NOT_YET: dict[str, int] = {}


def _public_classes() -> dict[str, type]:
    found = {}
    for module in (celery_redqueue, tasks):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) and value.__module__.startswith("celery_redqueue"):
                found[name] = value
    return found


def package_bases(cls: type) -> list[str]:
    return [k.__qualname__ for k in cls.__mro__ if k.__module__.startswith("celery_redqueue")]


def test_public_classes_have_at_most_four_package_classes_in_their_mro():
    classes = _public_classes()
    assert {"PoolTask", "BucketTask", "StreamTask", "CappedPool", "EventStream"} <= set(classes)
    over = {name: len(package_bases(cls)) for name, cls in classes.items()}
    over = {name: n for name, n in over.items() if n > MOST}
    assert set(over) <= set(NOT_YET), {n: package_bases(classes[n]) for n in over}
    for name, n in over.items():
        assert n <= NOT_YET[name], f"{name}: {package_bases(classes[name])}"
    assert set(NOT_YET) <= set(over), "within the bound now: take it off NOT_YET"


def test_the_task_kinds_read_top_to_bottom():
    # Each kind's task: its own class, the producer path (pools, buckets), the shared base.
    assert package_bases(tasks.PoolTask) == ["PoolTask", "ProducerTask", "RedQueueTask"]
    assert package_bases(tasks.StreamTask) == ["StreamTask", "RedQueueTask"]
    assert len(package_bases(tasks.BucketTask)) <= MOST

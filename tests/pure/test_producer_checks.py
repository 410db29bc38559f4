"""The producer path gives the answers Celery's own lookups give: the eager setting in every
spelling, and a bucket key named as a parameter. No Redis."""

import pytest
from celery import Celery

from celery_redqueue import BucketTask, PoolTask, RedisUnavailableError, RedQueueError

URL = "redis://127.0.0.1:1/0"  # never connected to: nothing here stores a call


@pytest.mark.parametrize(
    "settings",
    [
        {"redqueue_url": URL},
        {"redqueue_url": URL, "task_always_eager": True},
        {"CELERY_REDQUEUE_URL": URL, "CELERY_TASK_ALWAYS_EAGER": True},  # Django's namespace
        {"BROKER_URL": URL, "CELERY_ALWAYS_EAGER": True},  # Celery's old setting names
    ],
)
def test_the_eager_check_reads_what_celery_reads(settings):
    app = Celery("eager", set_as_current=False)
    namespace = "CELERY" if "CELERY_REDQUEUE_URL" in settings else None
    app.config_from_object(settings, namespace=namespace)
    ran = []

    @app.task(base=PoolTask, shared=False)
    def record(x):
        ran.append(x)

    for value in (None, True, False, True):
        if value is not None:
            app.conf.task_always_eager = value
        # What Celery reads (with a namespace, Celery 5.3 still reads the namespaced True).
        if app.conf.task_always_eager:
            record.delay(1)  # runs at once, storing nothing
            assert ran.pop() == 1
        else:
            with pytest.raises(RedisUnavailableError):  # it tried to store: nothing listens
                record.delay(1)
    app.close()


def test_a_named_bucket_key_is_read_however_it_is_passed():
    app = Celery("keys", set_as_current=False)
    app.conf.update(redqueue_url=URL)

    @app.task(base=BucketTask, bucket_key="user", shared=False)
    def fetch(url, user="anonymous", *, retries=0):
        pass

    # As delay() computes it (after Celery's check of the call), and as key_for() does.
    for key_of in (fetch._prepare_call, lambda a, k: (fetch.key_for(a, k),)):
        assert key_of(("u", "alice"), {})[0] == "alice"
        assert key_of(("u",), {"user": "bob"})[0] == "bob"
        assert key_of(("u",), {"retries": 2})[0] == "anonymous"
    with pytest.raises(RedQueueError, match="bucket_key"):
        fetch.key_for((), {})  # the body cannot take this call: no key either
    with pytest.raises(TypeError):
        fetch._prepare_call((), {})  # refused by Celery's check first, as before
    fetch.typing = False  # no check by Celery: the full binding decides
    assert fetch._prepare_call(("u", "carol"), {})[0] == "carol"
    with pytest.raises(RedQueueError, match="bucket_key"):
        fetch._prepare_call(("u", "dave"), {"user": "erin"})
    app.close()

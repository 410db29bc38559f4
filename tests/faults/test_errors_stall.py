"""Problem 8 of issue 8: a Redis that accepts connections but never answers (SIGSTOP) gives
RedisUnavailableError within seconds, by default, and everything works again once it resumes.

redis-py 8 has a 5 s socket timeout of its own; redis-py 6.4 to 7 (allowed by ``redis>=6.4``)
have none, and there these calls blocked forever before the package set its own defaults.
"""

import time

import pytest

from celery_redqueue import BucketTask, PoolTask, errors
from celery_redqueue.tasks.config import get_config
from celery_redqueue.tasks.lease import leased_resources

pytest_plugins = ["tests.faults.fixtures_errors"]


@pytest.mark.timeout(120)
def test_a_stalled_redis_is_unavailable_within_seconds_and_then_recovers(
    fault_server, make_app, stopped
):
    server = fault_server()
    app = make_app(server.url)  # no redqueue_redis_options: the package's defaults

    @app.task(base=PoolTask, shared=False)
    def pooled(x):
        pass

    @app.task(base=BucketTask, shared=False, bucket_key=lambda x: "k")
    def bucketed(x):
        pass

    gpus = leased_resources(app, "gpus", ["gpu-1"])
    held = gpus.acquire(ttl=60)
    calls = {
        "pool delay": lambda: pooled.delay(1),
        "bucket delay": lambda: bucketed.delay(1),
        "bucket figures": lambda: bucketed.structure.figures(),
        "lease acquire (wait 3 s)": lambda: gpus.acquire(ttl=5, wait=3),
    }
    for call in calls.values():
        call()  # connections are open before the stall
    took = {}
    with stopped(server):
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(errors.RedisUnavailableError) as raised:
                got = call()
                print(f"{name} returned {got!r} from a stopped Redis")  # shown if it fails
            took[name] = time.monotonic() - started
            assert "did not answer in time" in str(raised.value)
    print(
        "\n"
        + "\n".join(f"{name}: RedisUnavailableError after {s:.2f} s" for name, s in took.items())
    )
    assert pooled.delay(2).kept
    assert bucketed.delay(2)
    assert gpus.release(held)


@pytest.mark.timeout(60)
def test_the_package_clients_have_timeouts_unless_overridden(make_app, redqueue_server_url):
    def timeouts(app):
        kwargs = get_config(app).client().connection_pool.connection_kwargs
        return kwargs.get("socket_timeout"), kwargs.get("socket_connect_timeout")

    assert timeouts(make_app(redqueue_server_url)) == (5.0, 5.0)  # as the docs say (failure modes)
    custom = make_app(redqueue_server_url, redqueue_redis_options={"socket_timeout": 1.5})
    assert timeouts(custom) == (1.5, 5.0)

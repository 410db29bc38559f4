"""A drain job that can never be sent is a configuration error raised at once, never a broker
blip: the flag is not left to promise a drain that no later call can send."""

from __future__ import annotations

import pytest
from celery import Celery

from celery_redqueue import BrokerConfigurationError, PoolTask, pool_task
from celery_redqueue.testing import celery_test_config


def test_a_broker_whose_transport_cannot_load_fails_before_storing(
    redqueue_server_url, redqueue_prefix, redqueue_redis
):
    """kombu's ZooKeeper transport without kazoo installed, as the Redis transport without
    packaging was on a bare install: the task fails when it binds, the first call stores
    nothing."""
    app = Celery(f"nobroker-{redqueue_prefix}", set_as_current=False)
    app.conf.update(celery_test_config(redqueue_server_url, redqueue_prefix))
    app.conf.broker_url = "zookeeper://127.0.0.1:1/"

    @pool_task(app=app, pool_size=10, shared=False)  # not registered in later tests' apps
    def record(x):
        pass

    with pytest.raises(BrokerConfigurationError, match="kazoo") as raised:
        record.delay(1)
    assert isinstance(raised.value.__cause__, ImportError)
    assert not list(redqueue_redis.scan_iter(f"{redqueue_prefix}*"))  # nothing stored
    app.close()


def test_a_send_that_can_never_succeed_raises_and_releases_the_flag(app, redqueue_redis):
    """The transport loads, but every drain message fails to encode: the call is stored, the
    call raises the named error with the cause chained, and the drain flag is released (a
    later call, once the settings are fixed, sends the drain)."""

    @app.task(base=PoolTask, pool_size=10)
    def record(x):
        pass

    with pytest.raises(BrokerConfigurationError, match="its calls are stored") as raised:
        record.apply_async((1,), serializer="no-such-serializer")  # the drain job's serializer
    assert type(raised.value.__cause__).__name__ == "SerializerNotInstalled"
    stats = record.pool.stats()
    assert (stats.depth, stats.drains) == (1, 0)
    assert not redqueue_redis.exists(record.pool.keys("drains"))

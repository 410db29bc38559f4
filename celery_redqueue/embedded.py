"""A throwaway Redis server for demos, tests and development: the short, public name of
:mod:`celery_redqueue.testing.embedded`."""

from .testing.embedded import EmbeddedRedis, EmbeddedRedisCluster, find_server_binary
from .testing.sentinel import EmbeddedSentinel, EmbeddedSentinelGroup

__all__ = [
    "EmbeddedRedis",
    "EmbeddedRedisCluster",
    "EmbeddedSentinel",
    "EmbeddedSentinelGroup",
    "find_server_binary",
]

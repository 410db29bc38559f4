"""Settings read from ``app.conf`` (``redqueue_*``), validated once per app.

Django projects that load settings with ``namespace="CELERY"`` write ``CELERY_REDQUEUE_URL``
and so on; Celery strips the namespace, so both spellings arrive here as ``redqueue_url``.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ConfigurationError
from ..redis.client import get_client
from ..redis.keys import DEFAULT_PREFIX, normalize_prefix
from ..redis.sentinel import TRANSPORT_OPTIONS, is_sentinel_url, sentinel_options
from ..redis.serializers import Serializer, get_serializer
from ..validation import boolean, seconds

if TYPE_CHECKING:
    import redis
    from celery import Celery
    from celery.app.utils import Settings
    from redis.cluster import RedisCluster

REDIS_SCHEMES = (
    "redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://", "sentinel://",
)  # fmt: skip


@dataclass(frozen=True)
class RedQueueConfig:
    """The validated ``redqueue_*`` settings of one Celery app."""

    #: Where structures live. Falls back to ``broker_url`` when that is a Redis URL.
    url: str
    #: Namespaces every key: ``<prefix>:{pool:name}:items``.
    key_prefix: str = DEFAULT_PREFIX
    #: ``redqueue_serializer``: a kombu serializer name (``"json"`` by default; ``"pickle"``
    #: warns) or an object with dumps/loads, resolved once.
    serializer: Serializer = field(default_factory=lambda: get_serializer("json"))
    #: Extra keyword arguments for ``redis.Redis.from_url`` (TLS, ...), over the package's
    #: default timeouts (``socket_timeout`` and ``socket_connect_timeout`` of 5 s, see
    #: `DEFAULT_TIMEOUTS`; ``None`` waits forever).
    redis_options: dict[str, object] = field(default_factory=dict)
    #: ``redqueue_transport_options`` for a ``sentinel://`` URL: ``master_name`` (required),
    #: ``sentinel_kwargs``, ``min_other_sentinels`` (kombu's names), checked.
    transport_options: dict[str, object] = field(default_factory=dict)
    #: Register drain and reaper jobs with beat (``add_periodic_task``).
    beat: bool = True
    #: Seconds between runs of the reaper job under beat.
    reaper_interval: float = 30.0
    #: ``redqueue_tracing``: stored calls keep their caller's trace context and run in
    #: OpenTelemetry ``process`` spans linked to it (`tracing`). False when OpenTelemetry
    #: is not installed.
    tracing: bool = False
    #: ``redqueue_consumer``: ``celery worker`` runs the continuous consumer (docs/consumer.md)
    #: for the pooled, bucket and stream tasks routed to its queues (True), or for the tasks
    #: named in a list; ``celery worker --redqueue-consumer`` turns it on for one worker.
    consumer: bool | tuple[str, ...] = False
    #: ``redqueue_watchdog_interval``: seconds between the passes of every worker's watchdog
    #: (`watchdog`), which takes back what dead workers held and sends the drain job that work
    #: under no live drain flag needs (a drain killed while it held the flag, a send that
    #: failed while the broker was down), with or without beat; 0 turns it off.
    watchdog_interval: float = 2.0
    #: ``redqueue_drain_yield``: a drain in a ``celery worker`` ends after the batch at hand
    #: when the worker has other messages waiting (reserved and not started, or in its queues
    #: on the broker), handing over to a fresh drain job behind them (`neighbour`); False
    #: keeps its process for its whole time budget.
    drain_yield: bool = True

    def client(self) -> redis.Redis | RedisCluster:
        return get_client(self.url, {**self.redis_options, **self.transport_options})


def _resolve_url(conf: Settings) -> str:
    url = conf.get("redqueue_url")
    if url:
        if not isinstance(url, str) or not url.startswith(REDIS_SCHEMES):
            raise ConfigurationError(
                f"redqueue_url must be a Redis URL ({REDIS_SCHEMES}), got {url!r}"
            )
        return url
    broker = conf.get("broker_url")
    if isinstance(broker, str) and broker.startswith(("redis://", "rediss://", "sentinel://")):
        return broker
    raise ConfigurationError(
        f"redqueue_url is not set and broker_url ({broker!r}) is not a Redis URL: "
        "set redqueue_url (CELERY_REDQUEUE_URL in Django) to e.g. redis://localhost:6379/0"
    )


def load_config(conf: Settings) -> RedQueueConfig:
    """Validate the ``redqueue_*`` settings found in a Celery ``app.conf``."""
    options = conf.get("redqueue_redis_options") or {}
    if not isinstance(options, dict):
        raise ConfigurationError(f"redqueue_redis_options must be a dict, got {options!r}")
    serializer = get_serializer(conf.get("redqueue_serializer") or "json")
    beat = conf.get("redqueue_beat")
    interval = conf.get("redqueue_reaper_interval")
    interval = 30.0 if interval is None else interval
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        raise ConfigurationError(
            f"redqueue_reaper_interval must be positive seconds, got {interval!r}"
        )
    watchdog = conf.get("redqueue_watchdog_interval")
    watchdog = seconds("redqueue_watchdog_interval", 2.0 if watchdog is None else watchdog)
    drain_yield = conf.get("redqueue_drain_yield")
    drain_yield = boolean("redqueue_drain_yield", True if drain_yield is None else drain_yield)
    url = _resolve_url(conf)
    transport = conf.get("redqueue_transport_options")
    if transport is None and is_sentinel_url(url) and url == conf.get("broker_url"):
        # Structures on the broker's Sentinel group: kombu's master_name applies here too.
        broker_options = conf.get("broker_transport_options") or {}
        transport = {k: v for k, v in broker_options.items() if k in TRANSPORT_OPTIONS}
    return RedQueueConfig(
        url=url,
        key_prefix=normalize_prefix(conf.get("redqueue_key_prefix") or DEFAULT_PREFIX),
        serializer=serializer,
        redis_options=dict(options),
        transport_options=sentinel_options(url, transport),
        beat=True if beat is None else bool(beat),
        reaper_interval=float(interval),
        tracing=tracing_setting(conf),
        consumer=consumer_setting(conf.get("redqueue_consumer")),
        watchdog_interval=watchdog,
        drain_yield=drain_yield,
    )


#: Each app's validated settings, read once (kept here, not as an attribute on the app).
_configs: weakref.WeakKeyDictionary[Celery, RedQueueConfig] = weakref.WeakKeyDictionary()


def get_config(app: Celery) -> RedQueueConfig:
    """The app's validated settings, read once per app."""
    config = _configs.get(app)
    if config is None:
        config = _configs[app] = load_config(app.conf)
    return config


def forget_config(app: Celery) -> None:
    """Read the app's ``redqueue_*`` settings again on next use (after changing them, say in a
    test; structures already built keep their client)."""
    _configs.pop(app, None)


def consumer_setting(value: object) -> bool | tuple[str, ...]:
    """Check ``redqueue_consumer``: True/False, or the names of the tasks to serve (a list, or
    a comma-separated string)."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple | set | frozenset) and all(
        isinstance(name, str) and name for name in value
    ):
        return tuple(sorted(value)) or False
    raise ConfigurationError(
        f"redqueue_consumer must be True, False or a list of task names, got {value!r}"
    )


#: The tracing setting (Django: ``CELERY_REDQUEUE_TRACING``).
SETTING = "redqueue_tracing"
logger = logging.getLogger(__name__)


def tracing_setting(conf: Settings) -> bool:
    """Read ``redqueue_tracing``: True only if it is on and OpenTelemetry can be imported (a
    warning says so when it cannot: the app runs untraced rather than failing to start)."""
    value = conf.get(SETTING)
    if value is None or value is False:
        return False
    if value is not True:
        raise ConfigurationError(f"{SETTING} must be True or False, got {value!r}")
    try:
        import opentelemetry.trace  # noqa: F401  (tracing.py imports it for real)
    except ImportError:
        logger.warning(
            "%s is on but OpenTelemetry is not installed (pip install 'celery-redqueue[otel]'); "
            "calls are not traced",
            SETTING,
        )
        return False
    return True

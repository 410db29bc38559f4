"""Prometheus metrics of every structure, in the text exposition format: served at ``GET
/metrics`` by the dashboard and printed by ``celery -A proj redqueue metrics``. docs/operations.md
lists the series; per-key and per-group series are capped (``top_keys``, `GROUP_WINDOW`), so
cardinality stays bounded. Needs ``prometheus_client`` (the ``[dashboard]`` extra).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Final

import redis

from ..errors import ConfigurationError, RedQueueError
from .reading import SHED_REASONS, Operations

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

#: Per bucket, how many of the busiest keys get per-key series.
TOP_KEYS = 10


def _prometheus() -> ModuleType:
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError as exc:  # an optional extra: say how to get it
        raise ConfigurationError(
            "metrics need prometheus_client: pip install 'celery-redqueue[dashboard]'"
        ) from exc
    return prometheus_client


#: Every series family, in the order exported: key -> (type, name, help, extra label).
FAMILIES = {
    "depth": ("gauge", "depth", "Items waiting to be handed out.", ""),
    "in_flight": ("gauge", "in_flight", "Items handed out and not finished.", ""),
    "delayed": ("gauge", "delayed", "Items held until due.", ""),
    "dead": ("gauge", "dead", "Items in the dead-letter list.", ""),
    "oldest_age": ("gauge", "oldest_age_seconds", "Age of the oldest waiting item.", ""),
    "drain_eta": (
        "gauge", "drain_eta_seconds", "Time to empty at the last minute's out-rate.", ""
    ),
    "workers_needed": (
        "gauge", "workers_needed",
        "Worker processes needed to keep up with the last minute's in-rate.", "",
    ),
    "offered": ("counter", "offered", "Items offered.", ""),
    "processed": ("counter", "processed", "Items processed.", ""),
    "shed": ("counter", "shed", "Items shed, by reason.", "reason"),
    "key_depth": ("gauge", "key_depth", "Depth of a bucket's busiest keys.", "key"),
    "key_flight": ("gauge", "key_in_flight", "In-flight items of a bucket's busiest keys.", "key"),
    "resources": ("gauge", "resources", "Resources of a LeasedResources by state.", "state"),
    "acquired": ("counter", "leases_acquired", "Leases granted.", ""),
    "unique_held": ("gauge", "unique_keys_held", "Keys a unique-lock table holds now.", ""),
    "unique_acquired": ("counter", "unique_acquired", "Unique locks granted.", ""),
    "unique_refused": (
        "counter", "unique_refused", "Calls refused because another held their unique key.", "",
    ),
    "unique_expired": (
        "counter", "unique_expired",
        "Unique locks whose lease ran out before release (a dead or stalled holder).", "",
    ),
    "up": ("gauge", "structure_up", "1 when the structure could be read.", ""),
    "paused": (
        "gauge", "bucket_keys_paused",
        "Keys of a bucket paused now (a KeyBackoff or by hand): one series per bucket.", "",
    ),
    "backoffs": ("counter", "bucket_backoffs", "Calls put back by KeyBackoff (429s).", ""),
    "group_lag": (
        "gauge", "stream_group_lag",
        "Entries kept in a stream that a consumer group has not read yet.", "group",
    ),
    "group_pending": (
        "gauge", "stream_group_pending",
        "Entries handed to a consumer group and not acknowledged.", "group",
    ),
    "group_age": (
        "gauge", "stream_group_oldest_pending_age_seconds",
        "Age of a consumer group's oldest pending entry.", "group",
    ),
    "group_processed": (
        "counter", "stream_group_processed", "Entries a group acknowledged.", "group"
    ),
}  # fmt: skip
#: The families that export the figure of their name.
FIGURES: Final = (
    "depth",
    "in_flight",
    "delayed",
    "dead",
    "oldest_age",
    "drain_eta",
    "workers_needed",
)


class RedQueueCollector:
    """A prometheus_client collector reading every structure at each scrape; register it on
    your own registry: ``REGISTRY.register(RedQueueCollector(Operations.from_app(app)))``."""

    def __init__(self, ops: Operations, top_keys: int = TOP_KEYS) -> None:
        self.ops = ops
        self.top_keys = top_keys

    def collect(self) -> Iterator[Metric]:
        core = _prometheus().core
        types = {"gauge": core.GaugeMetricFamily, "counter": core.CounterMetricFamily}
        f = {
            key: types[kind](f"redqueue_{name}", text, labels=["kind", "name", *extra.split()])
            for key, (kind, name, text, extra) in FAMILIES.items()
        }
        for target in self.ops.targets():
            view = self.ops.view(target)
            ids = [target.kind, target.name]
            f["up"].add_metric(ids, 0 if "error" in view else 1)
            if "leases" in view:
                stats = view["leases"]
                for state in ("free", "leased", "expired"):
                    f["resources"].add_metric([*ids, state], stats[state])
                f["acquired"].add_metric(ids, stats["acquired"])
                continue
            if "unique" in view:
                stats = view["unique"]
                for name in ("held", "acquired", "refused", "expired"):
                    f[f"unique_{name}"].add_metric(ids, stats[name])
                continue
            if "figures" not in view:
                continue
            figures, counters = view["figures"], view["counters"]
            for figure in FIGURES:
                if (value := getattr(figures, figure)) is not None:
                    f[figure].add_metric(ids, value)
            f["offered"].add_metric(ids, figures.offered)
            f["processed"].add_metric(ids, figures.processed)
            for reason in SHED_REASONS.get(target.kind, ()):
                f["shed"].add_metric([*ids, reason], counters.get(reason, 0))
            for group in view.get("groups", ()):
                ids_group = [*ids, group.group]
                f["group_lag"].add_metric(ids_group, group.lag)
                f["group_pending"].add_metric(ids_group, group.pending)
                if group.oldest_pending_age is not None:
                    f["group_age"].add_metric(ids_group, group.oldest_pending_age)
                f["group_processed"].add_metric(ids_group, group.processed)
            if target.kind == "bucket":
                f["backoffs"].add_metric(ids, counters.get("backoffs", 0))
                with contextlib.suppress(RedQueueError, redis.exceptions.RedisError):
                    f["paused"].add_metric(ids, target.structure.paused_count())
            if target.kind == "bucket" and self.top_keys > 0:
                try:
                    rows = self.ops.keys(target, top=self.top_keys)
                except (RedQueueError, redis.exceptions.RedisError):
                    continue
                for row in rows:
                    f["key_depth"].add_metric([*ids, row["key"]], row["depth"])
                    f["key_flight"].add_metric([*ids, row["key"]], row["in_flight"])
        yield from f.values()


def render(ops: Operations, top_keys: int = TOP_KEYS) -> tuple[bytes, str]:
    """The metrics as the text exposition format, and its content type."""
    prometheus = _prometheus()
    registry = prometheus.CollectorRegistry(auto_describe=False)
    registry.register(RedQueueCollector(ops, top_keys))
    return prometheus.generate_latest(registry), prometheus.CONTENT_TYPE_LATEST

"""Prometheus metrics of every structure, in the text exposition format: served at ``GET
/metrics`` by the dashboard and printed by ``celery -A proj redqueue metrics``. docs/operations.md
lists the series; per-key and per-group series are capped (``top_keys``, `GROUP_WINDOW`), so
cardinality stays bounded. Needs ``prometheus_client`` (the ``[dashboard]`` extra).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis

from ..errors import ConfigurationError, RedQueueError
from .reading import DROP_REASONS, Operations

#: Per bucket, how many of the busiest keys get per-key series.
TOP_KEYS = 10


def _prometheus() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError as exc:  # an optional extra: say how to get it
        raise ConfigurationError(
            "metrics need prometheus_client: pip install 'celery-redqueue[dashboard]'"
        ) from exc
    return prometheus_client


class RedQueueCollector:
    """A prometheus_client collector reading every structure at each scrape; register it on
    your own registry: ``REGISTRY.register(RedQueueCollector(Operations.from_app(app)))``."""

    def __init__(self, ops: Operations, top_keys: int = TOP_KEYS) -> None:
        self.ops = ops
        self.top_keys = top_keys

    def collect(self) -> Iterator[Any]:
        core = _prometheus().core

        def metric(kind: Any, name: str, text: str, *extra: str) -> Any:
            return kind(f"redqueue_{name}", text, labels=["kind", "name", *extra])

        gauge, counter = core.GaugeMetricFamily, core.CounterMetricFamily
        g = {
            "depth": metric(gauge, "depth", "Items waiting to be handed out."),
            "in_flight": metric(gauge, "in_flight", "Items handed out and not finished."),
            "delayed": metric(gauge, "delayed", "Items held until due."),
            "dead": metric(gauge, "dead", "Items in the dead-letter list."),
            "oldest_age": metric(gauge, "oldest_age_seconds", "Age of the oldest waiting item."),
            "drain_eta": metric(
                gauge, "drain_eta_seconds", "Time to empty at the last minute's out-rate."
            ),
            "workers_needed": metric(
                gauge,
                "workers_needed",
                "Worker processes needed to keep up with the last minute's in-rate.",
            ),
        }
        offered = metric(counter, "offered", "Items offered.")
        processed = metric(counter, "processed", "Items processed.")
        dropped = metric(counter, "dropped", "Items shed, by reason.", "reason")
        key_depth = metric(gauge, "key_depth", "Depth of a bucket's busiest keys.", "key")
        key_flight = metric(
            gauge, "key_in_flight", "In-flight items of a bucket's busiest keys.", "key"
        )
        resources = metric(gauge, "resources", "Resources of a resource pool by state.", "state")
        acquired = metric(counter, "leases_acquired", "Leases granted.")
        group_lag = metric(
            gauge,
            "stream_group_lag",
            "Entries kept in a stream that a consumer group has not read yet.",
            "group",
        )
        group_pending = metric(
            gauge,
            "stream_group_pending",
            "Entries handed to a consumer group and not acknowledged.",
            "group",
        )
        group_age = metric(
            gauge,
            "stream_group_oldest_pending_age_seconds",
            "Age of a consumer group's oldest pending entry.",
            "group",
        )
        group_processed = metric(
            counter, "stream_group_processed", "Entries a group acknowledged.", "group"
        )
        paused = metric(
            gauge,
            "bucket_keys_paused",
            "Keys of a bucket paused now (a KeyBackoff or by hand): one series per bucket.",
        )
        backoffs = metric(counter, "bucket_backoffs", "Calls put back by KeyBackoff (429s).")
        up = metric(gauge, "structure_up", "1 when the structure could be read.")
        for target in self.ops.targets():
            view = self.ops.view(target)
            ids = [target.kind, target.name]
            up.add_metric(ids, 0 if "error" in view else 1)
            if "leases" in view:
                stats = view["leases"]
                for state in ("free", "leased", "expired"):
                    resources.add_metric([*ids, state], stats[state])
                acquired.add_metric(ids, stats["acquired"])
                continue
            if "figures" not in view:
                continue
            figures, counters = view["figures"], view["counters"]
            for name, family in g.items():
                if figures[name] is not None:
                    family.add_metric(ids, figures[name])
            offered.add_metric(ids, figures["offered"])
            processed.add_metric(ids, figures["processed"])
            for reason in DROP_REASONS.get(target.kind, ()):
                dropped.add_metric([*ids, reason], counters.get(reason, 0))
            for group in view.get("groups", ()):
                ids_group = [*ids, group["group"]]
                group_lag.add_metric(ids_group, group["lag"])
                group_pending.add_metric(ids_group, group["pending"])
                if group["oldest_pending_age"] is not None:
                    group_age.add_metric(ids_group, group["oldest_pending_age"])
                group_processed.add_metric(ids_group, group["processed"])
            if target.kind == "bucket":
                backoffs.add_metric(ids, counters.get("backoffs", 0))
                with contextlib.suppress(RedQueueError, redis.exceptions.RedisError):
                    paused.add_metric(ids, target.structure.paused_count())
            if target.kind == "bucket" and self.top_keys > 0:
                try:
                    rows = self.ops.keys(target, top=self.top_keys)
                except (RedQueueError, redis.exceptions.RedisError):
                    continue
                for row in rows:
                    key_depth.add_metric([*ids, row["key"]], row["depth"])
                    key_flight.add_metric([*ids, row["key"]], row["in_flight"])
        yield from g.values()
        yield from (offered, processed, dropped, key_depth, key_flight, resources, acquired, up)
        yield from (paused, backoffs)
        yield from (group_lag, group_pending, group_age, group_processed)


def render(ops: Operations, top_keys: int = TOP_KEYS) -> tuple[bytes, str]:
    """The metrics as the text exposition format, and its content type."""
    prometheus = _prometheus()
    registry = prometheus.CollectorRegistry(auto_describe=False)
    registry.register(RedQueueCollector(ops, top_keys))
    return prometheus.generate_latest(registry), prometheus.CONTENT_TYPE_LATEST

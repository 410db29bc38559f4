"""Keys and settings of one test: what the fixtures and a project's own tests share (no pytest
needed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..redis.client import Client


def delete_prefix(client: Client, prefix: str) -> int:
    """Delete every key that starts with ``prefix:``; returns how many."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += client.delete(*batch)
            batch.clear()
    if batch:
        deleted += client.delete(*batch)
    return int(deleted)


def celery_test_config(url: str, prefix: str) -> dict[str, object]:
    """Celery settings that keep broker and redqueue keys under ``prefix`` on ``url``."""
    return {
        "broker_url": url,
        "broker_transport_options": {"global_keyprefix": f"{prefix}:broker:"},
        "result_backend": None,
        "redqueue_url": url,
        "redqueue_key_prefix": prefix,
        "worker_hijack_root_logger": False,
        "broker_connection_retry_on_startup": False,
    }

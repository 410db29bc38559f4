"""The demo's Celery project: what a user writes. Configured by REDQUEUE_DEMO_URL."""

import os
import time

from celery import Celery

from celery_redqueue import pool_task

app = Celery(
    "example_project", broker=os.environ.get("REDQUEUE_DEMO_URL", "redis://localhost:6379/0")
)
app.conf.update(
    redqueue_key_prefix="demo",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@pool_task(pool_size=200, pool_batch_size=50, pool_drain_interval=2)
def record_page_view(page, user):
    """Pretend to store a page view somewhere slow (2 ms a call)."""
    time.sleep(0.002)


@pool_task(pool_size=1000, pool_coalesce=True, pool_drain_interval=2)
def count_error(fingerprint, count=1):
    """Error tracking: one call per report, one body run per fingerprint with its count."""
    print(f"error {fingerprint}: {count} new reports", flush=True)

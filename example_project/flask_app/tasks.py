"""The app's tasks: shared tasks, as the Flask docs write them, with redqueue decorators.

Both bodies use ``current_app``: they run inside the app context that ``FlaskTask`` pushes, one
context per call, also when a drain job runs many calls in a row.
"""

from __future__ import annotations

import redis
from flask import current_app

from celery_redqueue import bucket_task, pool_task


def _redis() -> redis.Redis:
    """One client per Flask app, made on first use."""
    if "redis" not in current_app.extensions:
        url = current_app.extensions["celery"].conf.broker_url
        current_app.extensions["redis"] = redis.Redis.from_url(url)
    client: redis.Redis = current_app.extensions["redis"]
    return client


@pool_task(pool_size=500, pool_coalesce=True, pool_drain_interval=2)
def record_hit(page: str, count: int = 1) -> None:
    """Count page hits: equal calls merge into one with a count; a burst never piles up."""
    _redis().hincrby(current_app.config["HITS_KEY"], page, count)


@bucket_task(bucket_key="domain", bucket_rate="5/s", bucket_drain_interval=2)
def fetch_feed(domain: str, path: str) -> None:
    """Fetch a feed at most 5 times a second per domain (pretend: record what would be fetched)."""
    _redis().rpush(current_app.config["FETCHED_KEY"], f"{domain}{path}")

"""The app's pages: each request stores a call in Redis and returns at once."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

from .tasks import _redis, fetch_feed, record_hit

bp = Blueprint("shop", __name__)


@bp.get("/page/<name>")
def page(name: str) -> dict[str, Any]:
    receipt = record_hit.delay(name)
    return {"page": name, "kept": receipt.kept, "merged": receipt.merged}


@bp.post("/feeds/<domain>")
def add_feed(domain: str) -> dict[str, Any]:
    receipt = fetch_feed.delay(domain, "/feed.xml")
    return {"domain": domain, "kept": receipt.kept}


@bp.get("/stats")
def stats() -> dict[str, Any]:
    client = _redis()
    hits = {k.decode(): int(v) for k, v in client.hgetall(current_app.config["HITS_KEY"]).items()}
    fetched = [f.decode() for f in client.lrange(current_app.config["FETCHED_KEY"], 0, -1)]
    pool, bucket = record_hit.pool.stats(), fetch_feed.bucket.stats()
    return {
        "hits": hits,
        "fetched": fetched,
        "pool": {"offered": pool.offered, "processed": pool.processed, "failed": pool.failed},
        "bucket": {"enqueued": bucket.enqueued, "processed": bucket.processed},
    }

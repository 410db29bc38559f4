"""The demo's Celery project: what a user writes. Configured by REDQUEUE_DEMO_URL."""

import os
import re
import time
import urllib.request
from urllib.parse import urlsplit

from celery import Celery

from celery_redqueue import bucket_task, pool_task
from celery_redqueue.tasks.config import get_config

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


# The crawler (python -m example_project.crawler): each domain has its own rate, held across
# every worker process; links found are crawled in turn; a URL is fetched once.
@bucket_task(
    bucket_key=lambda url: urlsplit(url).netloc,
    bucket_rate="2/s",
    # Requests reach a server 0.1 s or so after their release (worker pick-up, the request):
    # rates are spaced over their period plus that, so a server sees at most the rate.
    bucket_margin=0.1,
    bucket_visibility_timeout=30,
    autoretry_for=(OSError,),
    max_retries=3,
    retry_backoff=True,
)
def crawl(url):
    redis = get_config(app).client()
    if crawl.reservation:  # when the bucket released this call (server clock), for the demo
        released = f"{crawl.reservation.released_at!r} {url}"
        redis.rpush(f"demo:crawler:released:{urlsplit(url).netloc}", released)
    with urllib.request.urlopen(url, timeout=10) as response:
        page = response.read().decode()
    for link in re.findall(r'href="([^"]+)"', page):
        if redis.sadd("demo:crawler:seen", link):
            crawl.delay(link)

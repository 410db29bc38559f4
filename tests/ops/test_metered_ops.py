"""Operators see and steer a metered bucket: pauses (a KeyBackoff or by hand) and the
noisy-neighbour figures in the CLI, the dashboard (actions behind the token) and metrics (one
series per bucket, never one per key)."""

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from celery_redqueue import LeakyBucket

from .conftest import TOKEN
from .test_cli import redqueue
from .test_web import page_headers, request


def busy_bucket(client, prefix, name="llm"):
    bucket = LeakyBucket(client, name, prefix=prefix, default_rate="1000/s")
    bucket.enqueue_many([("hot", i) for i in range(6)] + [("cold", 1), ("limited", 1)])
    released = 0
    while released < 8:
        poll = bucket.dequeue()
        if poll.reservation is None:
            time.sleep(poll.wait or 0.001)
            continue
        released, reservation = released + 1, poll.reservation
        if reservation.key == "limited":
            bucket.backoff(reservation, 60)  # a 429 with Retry-After: 60
        else:
            bucket.commit(reservation)
    return bucket


def test_cli_pause_resume_and_noisy_neighbours(proc_env, redqueue_redis, redqueue_prefix):
    bucket = busy_bucket(redqueue_redis, redqueue_prefix)
    out = redqueue(proc_env, "pause", "bucket:llm", "cold").stdout
    assert "'cold' paused until resumed" in out
    assert bucket.paused_count() == 2
    figures = json.loads(redqueue(proc_env, "noisy", "bucket:llm", "--json").stdout)
    assert figures["busiest"][0]["key"] == "hot" and figures["busiest"][0]["share"] > 0.7
    assert {row["key"] for row in figures["longest_waiting"]} == {"limited"}
    assert {row["key"]: row["until"] is None for row in figures["paused"]} == {
        "cold": True,
        "limited": False,
    }
    text = redqueue(proc_env, "noisy", "bucket:llm").stdout
    assert "hot" in text and "paused (2)" in text and "until resumed" in text
    out = redqueue(proc_env, "resume", "bucket:llm", "limited").stdout
    assert "'limited' resumed" in out and bucket.paused_count() == 1
    time.sleep(0.01)
    assert bucket.dequeue().reservation.key == "limited"  # it goes again, at once
    assert "was not paused" in redqueue(proc_env, "resume", "bucket:llm", "limited").stdout
    stats = redqueue(proc_env, "stats", "bucket:llm", "--json").stdout
    assert json.loads(stats)["counters"]["backoffs"] == 1


def test_dashboard_shows_and_acts_on_pauses(dashboard, redqueue_redis, redqueue_prefix):
    base, _ = dashboard
    bucket = busy_bucket(redqueue_redis, redqueue_prefix)
    _, _, detail = request(f"{base}api/structure?id=bucket:llm")
    assert detail["noisy"]["busiest"][0]["key"] == "hot"
    assert detail["noisy"]["paused"][0]["key"] == "limited"
    body = {"action": "pause", "id": "bucket:llm", "key": "cold", "seconds": 30}
    status, _, answer = request(f"{base}api/action", body, {"Content-Type": "application/json"})
    assert status == 403 and bucket.paused_count() == 1  # no token, nothing done
    status, _, answer = request(f"{base}api/action", body, page_headers(base))
    assert status == 200 and "paused for 30 s" in answer["message"]
    assert bucket.paused_count() == 2
    resume = {"action": "resume", "id": "bucket:llm", "key": "cold"}
    status, _, answer = request(f"{base}api/action", resume, page_headers(base, TOKEN))
    assert status == 200 and "resumed" in answer["message"] and bucket.paused_count() == 1
    bad = dict(body, seconds="soon")
    assert request(f"{base}api/action", bad, page_headers(base))[0] == 400


def test_metrics_count_pauses_and_backoffs_per_bucket(dashboard, redqueue_redis, redqueue_prefix):
    base, _ = dashboard
    busy_bucket(redqueue_redis, redqueue_prefix)
    _, _, text = request(f"{base}metrics")
    samples = {
        (s.name, s.labels.get("name"), s.labels.get("key")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples["redqueue_bucket_keys_paused", "llm", None] == 1
    assert samples["redqueue_bucket_backoffs_total", "llm", None] == 1
    names = {name for name, _, key in samples if key is not None}
    assert "redqueue_bucket_keys_paused" not in names  # never one series per key

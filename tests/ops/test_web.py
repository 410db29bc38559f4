"""The dashboard's HTTP surface: JSON endpoints, and actions guarded by token, CSRF and origin."""

import json
import re
import urllib.error
import urllib.request
from dataclasses import fields

import pytest

from celery_redqueue import CappedPool, LeakyBucket, LeasedResources
from celery_redqueue.ops.dashboard import Dashboard, dashboard_app, mount
from celery_redqueue.ops.reading import Operations
from celery_redqueue.structures.figures import History

from .conftest import TOKEN


def request(url, body=None, headers=None, method=None):
    """(status, headers, parsed JSON or text) of one request; HTTP errors are answers too."""
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            status, head, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, head, raw = exc.code, dict(exc.headers), exc.read()
    text = raw.decode()
    if head.get("Content-Type") == "application/json":
        return status, head, json.loads(text)
    return status, head, text


def csrf_of(base):
    _, _, page = request(base)
    return re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)


def page_headers(base, token=TOKEN):
    return {
        "Content-Type": "application/json",
        "X-CSRF-Token": csrf_of(base),
        "Authorization": f"Bearer {token}",
        "Origin": base.rstrip("/"),
        "Sec-Fetch-Site": "same-origin",
    }


@pytest.fixture
def failed_pool(redqueue_redis, redqueue_prefix):
    pool = CappedPool(
        redqueue_redis,
        "jobs",
        100,
        prefix=redqueue_prefix,
        delivery="at_least_once",
        max_receives=1,
    )
    pool.add_many([[[i], {}] for i in range(5)])
    batch = pool.pop(10)
    pool.ack(batch, failures={i: f"ValueError: bad {i}" for i in range(3)})
    assert pool.stats().dead == 3
    return pool


def test_overview_and_detail_serve_figures(dashboard, failed_pool, redqueue_redis, redqueue_prefix):
    base, _ = dashboard
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix, default_rate="2/s")
    bucket.enqueue_many([("a.example", 1), ("a.example", 2), ("b.example", 3)])
    bucket.set_rate("b.example", "10/s", burst=3)
    leases = LeasedResources(redqueue_redis, "api-keys", ["k1", "k2"], prefix=redqueue_prefix)
    lease = leases.acquire(ttl=60)

    status, head, overview = request(base + "api/overview")
    assert status == 200 and "script-src 'self'" in head["Content-Security-Policy"]
    views = {v["id"]: v for v in overview["structures"]}
    assert set(views) == {"pool:jobs", "bucket:crawl", "lease:api-keys"}
    assert views["pool:jobs"]["figures"]["dead"] == 3
    assert views["pool:jobs"]["counters"]["accepted"] == 5
    assert views["pool:jobs"]["history"] is None  # the overview stays small: detail has it
    assert views["lease:api-keys"]["leases"]["leased"] == 1

    _, _, pool_detail = request(base + "api/structure?id=pool:jobs&dead_count=2")
    assert sum(pool_detail["history"]["minutes_in"]) == 5
    assert list(pool_detail["history"]) == [f.name for f in fields(History)]
    letters = pool_detail["dead_letters"]
    assert letters["total"] == 3 and len(letters["letters"]) == 2
    assert letters["letters"][0]["error"] == "ValueError: bad 0"
    assert re.fullmatch(r"\[\[\d\], \{\}\]", letters["letters"][0]["payload"])

    _, _, bucket_detail = request(base + "api/structure?id=bucket:crawl")
    keys = {k["key"]: k for k in bucket_detail["keys"]}
    assert keys["a.example"]["depth"] == 2 and keys["a.example"]["rate"] == 2
    assert keys["b.example"]["rate"] == 10 and keys["b.example"]["burst"] == 3
    _, _, found = request(base + "api/structure?id=bucket:crawl&q=b.ex")
    assert [k["key"] for k in found["keys"]] == ["b.example"]

    _, _, lease_detail = request(base + "api/structure?id=lease:api-keys")
    states = {r["resource"]: (r["state"], r["acquisitions"]) for r in lease_detail["resources"]}
    other = ({"k1", "k2"} - {lease.resource}).pop()
    assert states == {lease.resource: ("held", 1), other: ("free", 0)}

    status, _, missing = request(base + "api/structure?id=pool:nope")
    assert status == 400
    assert "no pool, bucket, stream, lease or unique named 'pool:nope'" in missing["error"]


def test_requeue_needs_token_csrf_and_same_origin(dashboard, failed_pool):
    base, _ = dashboard
    _, _, detail = request(base + "api/structure?id=pool:jobs")
    ref = detail["dead_letters"]["letters"][0]["ref"]
    body = {"action": "requeue", "id": "pool:jobs", "refs": [ref]}
    good = page_headers(base)
    refusals = {
        "no token": {k: v for k, v in good.items() if k != "Authorization"},
        "wrong token": dict(good, Authorization="Bearer not-the-token"),
        "no CSRF token": {k: v for k, v in good.items() if k != "X-CSRF-Token"},
        "other origin": dict(good, Origin="http://evil.example"),
        "cross-site fetch": dict(good, **{"Sec-Fetch-Site": "cross-site"}),
        "same-site, other port": dict(good, **{"Sec-Fetch-Site": "same-site"}),
    }
    for why, headers in refusals.items():
        status, _, answer = request(base + "api/action", body, headers)
        assert status == 403, (why, answer)
        assert failed_pool.stats().dead == 3, why
    status, _, answer = request(
        base + "api/action", b"action=requeue", dict(good, **{"Content-Type": "text/plain"})
    )
    assert status == 415 and failed_pool.stats().dead == 3

    status, _, answer = request(base + "api/action", body, good)
    assert status == 200 and answer["message"].startswith("requeued 1")
    stats = failed_pool.stats()
    assert (stats.dead, stats.depth) == (2, 1)

    status, _, answer = request(base + "api/action", {"action": "purge", "id": "jobs"}, good)
    assert status == 400 and "all: true" in answer["error"]  # "all" must be said
    status, _, answer = request(
        base + "api/action", {"action": "purge", "id": "jobs", "all": True}, good
    )
    assert status == 200 and answer["message"] == "purged 2"
    assert failed_pool.stats().purged == 2


def test_get_cannot_act_and_read_only_without_token(app, serve, failed_pool):
    base = serve(Dashboard(Operations.from_app(app), token=None))
    status, _, _ = request(base + "api/action?action=purge&id=jobs&all=true")
    assert status == 405
    status, _, answer = request(
        base + "api/action", {"action": "purge", "id": "jobs", "all": True}, page_headers(base, "")
    )
    assert status == 403 and "read-only" in answer["error"]
    _, _, page = request(base)
    assert 'name="redqueue-actions" content="off"' in page
    assert failed_pool.stats().dead == 3


def test_set_rate_and_drain_now(dashboard, app, redqueue_redis, redqueue_prefix):
    from celery_redqueue import PoolTask

    base, _ = dashboard

    @app.task(base=PoolTask, pool_size=100, name="ops.record")
    def record(x):
        return x

    record.pool.add([[1], {}])
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix)
    bucket.enqueue("k", 1)
    headers = page_headers(base)
    body = {"action": "set_rate", "id": "bucket:crawl", "key": "k", "rate": "5/s", "burst": 2}
    status, _, answer = request(base + "api/action", body, headers)
    assert status == 200, answer
    stats = bucket.key_stats("k")
    assert stats.interval == pytest.approx(0.2) and stats.burst == 2
    bad = dict(body, rate="fast")
    status, _, answer = request(base + "api/action", bad, headers)
    assert status == 400 and "rate" in answer["error"]

    broker = f"{redqueue_prefix}:broker:celery"
    before = redqueue_redis.llen(broker)
    status, _, answer = request(
        base + "api/action", {"action": "drain", "id": "ops.record"}, headers
    )
    assert status == 200 and answer["message"] == "drain job sent"
    assert redqueue_redis.llen(broker) == before + 1
    message = json.loads(redqueue_redis.lindex(broker, 0))
    assert message["headers"]["task"] == "ops.record" and message["headers"]["redqueue_drain"] == 1


def test_bucket_actions_refuse_numbers_that_are_not_numbers(
    dashboard, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix)
    bucket.enqueue("k", 1)
    headers = page_headers(base)
    cases = [
        ({"action": "set_rate", "rate": "5/s", "burst": "2"}, "burst must be a number"),
        ({"action": "set_rate", "rate": "5/s", "burst": True}, "burst must be a number"),
        ({"action": "pause", "seconds": "10"}, "seconds must be a number or null"),
        ({"action": "resume", "seconds": [1]}, "seconds must be a number or null"),
    ]
    for extra, error in cases:
        body = {"id": "bucket:crawl", "key": "k", **extra}
        status, _, answer = request(base + "api/action", body, headers)
        assert (status, answer["error"]) == (400, error), extra
    assert bucket.key_stats("k").paused_until is None  # nothing was changed
    status, _, answer = request(
        base + "api/action", {"action": "pause", "id": "bucket:crawl", "key": "k"}, headers
    )
    assert status == 200 and "paused until resumed" in answer["message"]


def test_mounted_under_a_path_and_configured_token(app, serve, failed_pool):
    app.conf.redqueue_dashboard_token = TOKEN

    def other(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the host project"]

    board = dashboard_app(app)
    assert board.token == TOKEN
    base = serve(mount(other, "/ops/redqueue", board))
    assert request(base + "elsewhere")[2] == "the host project"
    status, _, _ = request(base + "ops/redqueue")
    assert status == 200  # redirected to the slash, where relative links work
    _, _, overview = request(base + "ops/redqueue/api/overview")
    assert [v["id"] for v in overview["structures"]] == ["pool:jobs"]
    with pytest.raises(ValueError):
        Dashboard(Operations.from_app(app), token="short")


def test_one_broken_structure_does_not_hide_the_others(dashboard, failed_pool, redqueue_redis):
    base, _ = dashboard
    broken = CappedPool(redqueue_redis, "broken", 10, prefix=failed_pool.keys.prefix)
    broken.add(1)
    redqueue_redis.delete(broken.keys("flow"))
    redqueue_redis.set(broken.keys("flow"), "not a hash")  # WRONGTYPE for its figures script
    _, _, overview = request(base + "api/overview")
    views = {v["id"]: v for v in overview["structures"]}
    assert "WRONGTYPE" in views["pool:broken"]["error"]
    assert views["pool:jobs"]["figures"]["dead"] == 3
    with urllib.request.urlopen(base + "metrics", timeout=30) as response:
        text = response.read().decode()
    assert 'redqueue_structure_up{kind="pool",name="broken"} 0.0' in text
    assert 'redqueue_dead{kind="pool",name="jobs"} 3.0' in text


def test_server_warnings_name_the_eviction_policy(dashboard, redqueue_redis):
    base, _ = dashboard
    old = redqueue_redis.config_get("maxmemory-policy")["maxmemory-policy"]
    redqueue_redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        _, _, overview = request(base + "api/overview")
    finally:
        redqueue_redis.config_set("maxmemory-policy", old)
    assert any("maxmemory-policy is allkeys-lru" in w for w in overview["warnings"])
    _, _, overview = request(base + "api/overview")
    assert not any("maxmemory-policy" in w for w in overview["warnings"])


def test_unexpected_host_is_refused_when_hosts_are_given(app, serve, failed_pool):
    base = serve(Dashboard(Operations.from_app(app), allowed_hosts=["127.0.0.1", "localhost"]))
    status, _, _ = request(base + "api/overview")
    assert status == 200
    # A page whose own name was rebound to 127.0.0.1 sends its name in Host.
    status, _, answer = request(base + "api/overview", headers={"Host": "attacker.example:80"})
    assert status == 400 and answer == {"error": "unexpected Host header"}


def test_unopenable_structures_and_unreadable_letters_are_shown(
    dashboard, failed_pool, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard
    strange = CappedPool(redqueue_redis, "strange", 10, prefix=redqueue_prefix)
    strange.add(1)
    redqueue_redis.set(strange.keys("meta"), json.dumps({"capacity": 10, "frobnicate": True}))
    redqueue_redis.rpush(failed_pool.keys("dead"), b"not json at all")
    _, _, overview = request(base + "api/overview")
    views = {v["id"]: v for v in overview["structures"]}
    assert "cannot open from its recorded settings" in views["pool:strange"]["error"]
    status, _, answer = request(base + "api/structure?id=pool:strange")
    assert status == 400 and "frobnicate" in answer["error"]

    _, _, detail = request(base + "api/structure?id=pool:jobs")
    letters = detail["dead_letters"]["letters"]
    assert letters[-1]["error"] == "unreadable dead-letter entry"
    assert letters[-1]["payload"] == repr(b"not json at all")
    assert [x["error"] for x in letters[:3]] == [f"ValueError: bad {i}" for i in range(3)]

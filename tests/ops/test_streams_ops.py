"""Streams in the operator tools: the dashboard's JSON and page, its actions, and metrics."""

import urllib.request
from dataclasses import fields

from celery_redqueue import EventStream, StreamTask
from celery_redqueue.ops.reading import GROUP_WINDOW
from celery_redqueue.structures.figures import Figures
from celery_redqueue.structures.streams import GroupFigures

from .test_metrics import samples
from .test_web import page_headers, request


def test_dashboard_shows_a_stream_with_its_groups_and_drains_each_group(
    dashboard, app, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard

    @app.task(
        base=StreamTask, name="ops.sms", stream_name="orders", stream_group="sms",
        stream_max_receives=1,
    )  # fmt: skip
    def sms(event):
        pass

    @app.task(base=StreamTask, name="ops.loyalty", stream_name="orders", stream_group="loyalty")
    def loyalty(event):
        pass

    stream = sms.stream
    stream.publish_many([{"order": i} for i in range(5)])
    read = stream.read("sms", "c1", 3)
    stream.ack(read, failures={read.events[0].id: "ValueError: bad order 0"})  # dead at once
    held = stream.read("sms", "c1", 1)  # handed out, not acknowledged: pending
    assert len(held) == 1

    _, _, overview = request(base + "api/overview")
    view = {v["id"]: v for v in overview["structures"]}["stream:orders"]
    assert (view["figures"]["depth"], view["figures"]["in_flight"]) == (6, 1)
    assert view["figures"]["dead"] == 1
    groups = [(g["group"], g["lag"], g["pending"], g["dead"]) for g in view["groups"]]
    assert groups == [("loyalty", 5, 0, 0), ("sms", 1, 1, 1)]  # the most behind first
    sms_view = view["groups"][1]
    assert sms_view["oldest_pending_age"] >= 0 and sms_view["processed"] == 2
    # The JSON carries every field of the structures' records, with no list of its own.
    assert list(sms_view) == [f.name for f in fields(GroupFigures)]
    extra = ("counters", "history")
    assert list(view["figures"]) == [f.name for f in fields(Figures) if f.name not in extra]

    _, _, detail = request(base + "api/structure?id=stream:orders")
    assert [g["group"] for g in detail["groups"]] == ["loyalty", "sms"]
    letters = detail["dead_letters"]
    assert letters["total"] == 1 and letters["letters"][0]["key"] == "sms"
    assert letters["letters"][0]["error"] == "ValueError: bad order 0"
    assert detail["can_drain"] is True and detail["counters"]["published"] == 5

    broker = f"{redqueue_prefix}:broker:celery"
    headers = page_headers(base)
    before = redqueue_redis.llen(broker)
    status, _, answer = request(base + "api/action", {"action": "drain", "id": "orders"}, headers)
    assert status == 200 and answer["message"] == "drain jobs sent (loyalty, sms)", answer
    sent = redqueue_redis.lrange(broker, 0, 1)
    assert redqueue_redis.llen(broker) == before + 2 and all(b"redqueue_drain" in m for m in sent)

    body = {"action": "requeue", "id": "stream:orders", "all": True}
    status, _, answer = request(base + "api/action", body, headers)
    assert status == 200 and answer["message"].startswith("requeued 1; drain jobs sent"), answer
    assert stream.dead_letters() == [] and stream.stats()["requeued"] == 1


def test_metrics_export_lag_and_pending_per_group_for_the_most_behind_groups(
    dashboard, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard
    names = [f"g{i:02}" for i in range(GROUP_WINDOW + 5)]
    stream = EventStream(redqueue_redis, "clicks", prefix=redqueue_prefix, groups=names)
    stream.publish_many(["a", "b", "c"])
    for name in names[:5]:  # caught up: lag 0, the least behind, left out of the series
        stream.ack(stream.read(name, "c", 10))
    stream.read("g05", "c", 1)  # lag 2, one pending

    with urllib.request.urlopen(base + "metrics", timeout=30) as response:
        found = samples(response.read().decode())
    lag = {
        dict(labels)["group"]: value
        for (name, labels), value in found.items()
        if name == "redqueue_stream_group_lag"
    }
    assert lag == {name: (2 if name == "g05" else 3) for name in names[5:]}  # bounded
    g05 = frozenset({("kind", "stream"), ("name", "clicks"), ("group", "g05")})
    g06 = frozenset({("kind", "stream"), ("name", "clicks"), ("group", "g06")})
    assert found["redqueue_stream_group_pending", g05] == 1
    assert found["redqueue_stream_group_pending", g06] == 0
    assert found["redqueue_stream_group_oldest_pending_age_seconds", g05] >= 0
    assert ("redqueue_stream_group_oldest_pending_age_seconds", g06) not in found
    stream_labels = frozenset({("kind", "stream"), ("name", "clicks")})
    assert found["redqueue_depth", stream_labels] == 2 + 3 * (GROUP_WINDOW - 1)
    assert found["redqueue_shed_total", stream_labels | {("reason", "trimmed")}] == 0


def test_page_lists_groups_under_their_stream_and_in_its_detail(
    dashboard, browser, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard
    stream = EventStream(
        redqueue_redis, "parcels", prefix=redqueue_prefix, groups=["label", "notify"]
    )
    stream.publish_many(["a", "b", "c"])
    stream.read("label", "c1", 2)

    page = browser.new_page()
    page.goto(base + "#stream%3Aparcels")
    page.wait_for("document.querySelectorAll('#groups tbody tr').length === 2", message="groups")
    rows_js = (
        "[...document.querySelectorAll('#structures tr.group')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))"
    )
    rows = page.eval(rows_js)
    assert [row[:3] for row in rows] == [["group notify", "3", "0"], ["group label", "1", "2"]]
    assert rows[0][7] == "-" and rows[1][7].endswith("s")  # oldest pending age
    detail = page.eval(
        "[...document.querySelectorAll('#groups tbody tr')]"
        ".map((tr) => [...tr.cells].slice(0, 3).map((td) => td.textContent))"
    )
    assert detail == [["notify", "3", "0"], ["label", "1", "2"]]
    page.screenshot("stream")

    # Live: more events raise every group's lag on the next refresh, without a reload.
    page.eval("window.sameDocument = true")
    stream.publish_many(["d", "e"])
    page.wait_for(
        f"JSON.stringify({rows_js}.map((r) => r[1])) === JSON.stringify(['5', '3'])",
        message="lags refreshed",
    )
    assert page.eval("window.sameDocument") is True

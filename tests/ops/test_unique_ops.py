"""Operator tools on unique-lock tables: `redqueue list`, `stats`, `unique NAME` (held keys:
who holds each, since when, until when), `top`, Prometheus metrics (refusals counted), and the
dashboard page in a real headless Chromium."""

import json
import re
import time

from prometheus_client.parser import text_string_to_metric_families

from celery_redqueue import Lease, UniqueLocks
from celery_redqueue.ops.reading import Operations
from celery_redqueue.ops.top import frame
from celery_redqueue.structures.unique import QUEUED, Refused

from .test_cli import redqueue

TABLE = "proj.tasks.nightly"


def _table(client, prefix, wait_for):
    """Three keys held: one running, one queued, one whose holder died (its lease ran out);
    two duplicates refused."""
    locks = UniqueLocks(client, TABLE, prefix=prefix)
    running = locks.acquire("report", task_id="t-run", ttl=120, who="host-a:101")
    queued = locks.acquire(
        "index", task_id="t-queued", token="t-queued", ttl=3600, who="host-b:202", phase=QUEUED
    )
    dead = locks.acquire("gone", task_id="t-dead", ttl=0.2, who="host-c:303")
    assert all(isinstance(x, Lease) for x in (running, queued, dead))
    assert isinstance(locks.acquire("report", task_id="t-dup1", ttl=60), Refused)
    assert isinstance(locks.acquire("index", task_id="t-dup2", ttl=60), Refused)
    wait_for(lambda: locks.holder("gone") is None, timeout=10, message="the dead lease to run out")
    return locks


def test_cli_lists_held_keys_and_counts_refusals(
    proc_env, redqueue_redis, redqueue_prefix, wait_for
):
    _table(redqueue_redis, redqueue_prefix, wait_for)
    listed = redqueue(proc_env, "list").stdout
    assert re.search(rf"unique:{TABLE}\s+3 held; 3 acquired, 2 refused", listed), listed
    assert (
        json.loads(redqueue(proc_env, "list", "--json").stdout)[f"unique:{TABLE}"]["refused"] == 2
    )

    out = redqueue(proc_env, "unique", "nightly").stdout
    assert f"unique:{TABLE}: 3 held; 3 acquired, 2 refused, 0 released, 0 expired" in out
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert set(lines) == {"report", "index", "gone"}
    assert re.search(r"t-run\s+running .* host-a:101$", lines["report"])
    assert re.search(r"t-queued\s+queued .* host-b:202$", lines["index"])
    assert lines["gone"].endswith("host-c:303 (expired: its holder died)")

    data = json.loads(redqueue(proc_env, "unique", f"unique:{TABLE}", "--json").stdout)
    assert data["stats"]["refused"] == 2
    rows = {row["key"]: row for row in data["held"]}
    assert rows["gone"]["state"] == "expired" and rows["gone"]["expires_in"] <= 0
    assert rows["report"]["state"] == "held" and 0 < rows["report"]["expires_in"] <= 120
    assert rows["report"]["since"] <= time.time() < rows["report"]["until"]
    assert (rows["index"]["task_id"], rows["index"]["phase"]) == ("t-queued", "queued")

    stats = redqueue(proc_env, "stats", "nightly").stdout
    assert re.search(r"refused\s+2\b", stats) and re.search(r"handed_back\s+0\b", stats)

    text = redqueue(proc_env, "metrics").stdout
    samples = {
        (s.name, s.labels["name"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("kind") == "unique"
    }
    assert samples[("redqueue_unique_refused_total", TABLE)] == 2
    assert samples[("redqueue_unique_acquired_total", TABLE)] == 3
    assert samples[("redqueue_unique_keys_held", TABLE)] == 3
    assert samples[("redqueue_structure_up", TABLE)] == 1


def test_top_shows_a_unique_table(redqueue_redis, redqueue_prefix, wait_for):
    _table(redqueue_redis, redqueue_prefix, wait_for)
    lines = frame(Operations(redqueue_redis, redqueue_prefix).overview(history=True))
    line = next(line for line in lines if line.startswith(f"unique:{TABLE}"))
    assert re.search(r"3 held\s+2 refused\s+0 expired", line)


def test_dashboard_shows_held_keys(dashboard, browser, redqueue_redis, redqueue_prefix, wait_for):
    base, _ = dashboard
    _table(redqueue_redis, redqueue_prefix, wait_for)
    page = browser.new_page()
    page.goto(base)
    row = f'#unique tr[data-id="unique:{TABLE}"]'
    page.wait_for(f"document.querySelector('{row}') !== null", message="the table's row")
    cells = page.eval(f"[...document.querySelector('{row}').cells].map((td) => td.textContent)")
    assert cells == [f"unique:{TABLE}", "3", "3", "2", "0", "0", "0"]
    assert page.eval("document.getElementById('unique-section').hidden") is False
    page.eval(f"document.querySelector('{row}').click()")
    page.wait_for("document.querySelectorAll('#held tbody tr').length === 3", message="held keys")
    rows = page.eval(
        "[...document.querySelectorAll('#held tbody tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))"
    )
    by_key = {r[0]: r for r in rows}
    assert by_key["report"][1:4] == ["t-run", "host-a:101", "running"]
    assert by_key["report"][6].startswith("held, ")
    assert by_key["index"][1:4] == ["t-queued", "host-b:202", "queued"]
    assert by_key["gone"][6] == "expired (its holder died)"
    assert page.eval("document.getElementById('chart').hidden") is True
    assert page.eval("document.getElementById('dead-box').hidden") is True
    page.screenshot("unique")

"""The dashboard page in a real headless Chromium: live figures, chart, escaping, actions.

Screenshots are written to each test's tmp_path (redqueue-dashboard-*.png) for a human to
look at: pytest keeps the last runs' under its base temp directory.
"""

import http.server
import json
import threading
import time

import pytest

from celery_redqueue import CappedPool, LeakyBucket, LeasedResources, PoolTask

from .conftest import TOKEN, running_worker

SCRIPT_PAYLOAD = "<script>window.pwned = 'payload'</script>"
ERROR_TEXT = "ValueError: <img src=x onerror=\"window.pwned='error'\">"


def cell(row_id, column):
    """JavaScript: the text of one cell of a structure's row (1: name, 2: depth, ...)."""
    return (
        f"(document.querySelector('#structures tr[data-id=\"{row_id}\"] td:nth-child({column})')"
        " || {}).textContent"
    )


def number(text):
    return int(text.replace(",", "").replace("\u202f", "").replace("\xa0", ""))


@pytest.fixture
def evil(redqueue_redis, redqueue_prefix):
    """A pool whose dead letters carry markup in their payload and error text."""
    pool = CappedPool(
        redqueue_redis, "evil", 100, prefix=redqueue_prefix, delivery="at_least_once",
        max_receives=1,
    )  # fmt: skip
    pool.add_many([SCRIPT_PAYLOAD, "second"])
    batch = pool.pop(10)
    pool.ack(batch, failures={i: ERROR_TEXT for i in range(len(batch))})
    assert pool.stats().dead == 2
    return pool


def test_page_shows_live_figures_chart_escaped_letters_and_acts_with_token(
    app, dashboard, browser, evil, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard

    @app.task(base=PoolTask, name="ops.slow", pool_size=1000, pool_batch_size=5)
    def slow(i):
        time.sleep(0.01)

    slow.add_many([((i,), {}) for i in range(300)])
    bucket = LeakyBucket(redqueue_redis, "crawl", prefix=redqueue_prefix, default_rate="1/s")
    bucket.enqueue_many([(f"shop-{i}.example", n) for i in range(6) for n in range(i * 3 + 1)])
    bucket.set_rate("shop-5.example", "20/s", burst=5)

    page = browser.new_page()
    page.goto(base + "#pool%3Aops.slow")
    page.wait_for("document.body.dataset.loaded >= 1", message="first refresh")
    assert page.eval("document.title") == "redqueue"
    assert number(page.wait_for(cell("pool:ops.slow", 2))) == 300
    page.eval("window.sameDocument = true")

    # Live: a real worker drains while the page polls; the figures change without a reload.
    with running_worker(app):
        page.wait_for(
            f"Number(({cell('pool:ops.slow', 2)} || '300').replace(/\\D/g, '')) < 300",
            message="depth shown below 300 while draining",
        )
        page.wait_for(f"{cell('pool:ops.slow', 7)} !== '0.00'", message="out-rate shown")
        page.wait_for("Number(document.getElementById('chart').dataset.points) > 0")
        page.screenshot("draining")
        page.wait_for(f"{cell('pool:ops.slow', 2)} === '0'", timeout=120, message="drained")
    assert page.eval("window.sameDocument") is True
    # The chart was drawn: bars and the depth line put coloured pixels on the canvas.
    coloured = page.eval(
        "(() => { const c = document.getElementById('chart');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0; for (let i = 0; i < d.length; i += 4)"
        " if (d[i + 3] && (Math.abs(d[i] - d[i + 1]) > 40 || Math.abs(d[i + 1] - d[i + 2]) > 40))"
        " n++; return n; })()"
    )
    assert coloured > 50
    page.eval(
        "document.getElementById('span').value = 'minute';"
        " document.getElementById('span').dispatchEvent(new Event('change'))"
    )
    page.wait_for("Number(document.getElementById('chart').dataset.points) > 1")
    page.screenshot("per-second")

    # Dead letters: markup in payloads and errors is shown as text, never run or parsed.
    page.eval("location.hash = '#pool%3Aevil'; location.reload()")
    page.wait_for("document.querySelectorAll('#dead tbody tr').length === 2")
    payloads = page.eval(
        "[...document.querySelectorAll('#dead td.payload')].map((td) => td.textContent)"
    )
    assert json.dumps(SCRIPT_PAYLOAD) in payloads
    errors = page.eval(
        "[...document.querySelectorAll('#dead td.error')].map((td) => td.textContent)"
    )
    assert errors == [ERROR_TEXT, ERROR_TEXT]
    assert page.eval("document.querySelectorAll('#dead script, #dead img').length") == 0
    assert page.eval("typeof window.pwned") == "undefined"

    # Requeue without the token: refused (403), nothing moves.
    select_script_letter = (
        "(() => { const box = [...document.querySelectorAll('#dead tbody tr')].find((tr) =>"
        " tr.querySelector('td.payload').textContent.includes('<script>'))"
        ".querySelector('input'); if (!box.checked) box.click(); })()"
    )
    page.eval(select_script_letter)
    page.eval("document.getElementById('requeue-selected').click()")
    status = page.wait_for("document.getElementById('status').textContent")
    assert status == "403: a valid token is needed for actions"
    assert evil.stats().dead == 2

    # With the token: the selected letter goes back to the pool.
    page.eval(
        f"document.getElementById('token').value = {json.dumps(TOKEN)};"
        " document.querySelector('#unlock button').click()"
    )
    page.eval(select_script_letter)
    page.eval("document.getElementById('status').textContent = ''")  # the 403 of before
    page.eval("document.getElementById('requeue-selected').click()")
    status = page.wait_for("document.getElementById('status').textContent")
    assert status.startswith("requeued 1"), status
    stats = evil.stats()
    assert (stats.dead, stats.depth) == (1, 1)
    assert evil.pop(10).items[0].payload == SCRIPT_PAYLOAD
    page.wait_for("document.querySelectorAll('#dead tbody tr').length === 1")
    page.screenshot("dead-letters")

    # A bucket's busiest keys, searchable.
    page.eval("location.hash = '#bucket%3Acrawl'; location.reload()")
    page.wait_for("document.querySelectorAll('#keys tbody tr').length === 6")
    first = page.eval("document.querySelector('#keys tbody td').textContent")
    assert first == "shop-5.example"
    page.eval(
        "document.getElementById('key-query').value = 'shop-2';"
        " document.querySelector('#key-search button').click()"
    )
    page.wait_for("document.querySelectorAll('#keys tbody tr').length === 1")
    page.screenshot("bucket-keys")

    # Set a key's rate from the page (the token is still set in this tab).
    page.eval(
        "document.getElementById('rate-key').value = 'shop-2.example';"
        " document.getElementById('rate-value').value = '7/s';"
        " document.getElementById('rate-burst').value = '3';"
        " document.getElementById('status').textContent = '';"
        " document.querySelector('#set-rate button').click()"
    )
    status = page.wait_for("document.getElementById('status').textContent")
    assert status == "rate of 'shop-2.example' set to 7/s (burst 3)", status
    rate = bucket.key_stats("shop-2.example")
    assert rate.interval == pytest.approx(1 / 7) and rate.burst == 3

    # "Drain now" sends one drain job for a structure whose task the app has.
    broker = f"{redqueue_prefix}:broker:celery"
    before = redqueue_redis.llen(broker)
    page.eval("location.hash = '#pool%3Aops.slow'; location.reload()")
    page.wait_for("!document.getElementById('drain').hidden", message="the drain button")
    page.eval(
        "document.getElementById('status').textContent = '';"
        " document.getElementById('drain').click()"
    )
    assert page.wait_for("document.getElementById('status').textContent") == "drain job sent"
    assert redqueue_redis.llen(broker) == before + 1

    # Leased resources: their own table, and each resource with its lease.
    creds = LeasedResources(
        redqueue_redis, "creds", ["key-1", "key-2", "key-3"], prefix=redqueue_prefix
    )
    lease = creds.acquire(ttl=120)
    page.eval("location.hash = '#lease%3Acreds'; location.reload()")
    page.wait_for("document.querySelectorAll('#resources tbody tr').length === 3")
    rows = page.eval(
        "[...document.querySelectorAll('#resources tbody tr')]"
        ".map((tr) => [...tr.cells].map((td) => td.textContent))"
    )
    assert rows[0][:2] == [lease.resource, "held"] and rows[0][3] == "1"
    assert sorted(r[1] for r in rows[1:]) == ["free", "free"]
    held = page.eval(
        "document.querySelector('#leases tr[data-id=\"lease:creds\"] td:nth-child(4)').textContent"
    )
    assert held == "1"
    assert page.eval("document.getElementById('chart').hidden") is True
    page.screenshot("leases")


class _AttackerPage(http.server.BaseHTTPRequestHandler):
    """Serves, on another origin, a page that tries to requeue through the dashboard."""

    target = ""

    def do_GET(self):
        body = f"""<!doctype html><title>elsewhere</title>
<form id="f" method="POST" action="{self.target}api/action" enctype="text/plain">
<input name='{{"action": "purge", "id": "pool:evil", "all": true, "x": "' value='"}}'>
</form>
<script>
fetch("{self.target}api/action", {{method: "POST", headers: {{"Content-Type": "application/json",
  "X-CSRF-Token": "guessed", "Authorization": "Bearer {TOKEN}"}},
  body: JSON.stringify({{action: "purge", id: "pool:evil", all: true}})}})
  .then(() => {{ document.title = "fetch went through"; }})
  .catch(() => {{ document.title = "fetch blocked"; }})
  .finally(() => document.getElementById("f").submit());
</script>"""
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_actions_from_another_origin_are_refused(dashboard, browser, evil):
    base, _ = dashboard
    handler = type("Attacker", (_AttackerPage,), {"target": base})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        # The fetch with the token is stopped by the browser (no CORS answer for a preflight);
        # the plain form post reaches the server and is refused there.
        text = page.wait_for(
            "location.href.endsWith('/api/action') && document.body && document.body.textContent",
            message="the form's answer",
        )
        assert json.loads(text) == {"error": "cross-site request refused"}
        page.screenshot("cross-origin")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert evil.stats().dead == 2 and evil.stats().purged == 0


def test_read_only_page_shows_no_action_controls(app, serve, browser, evil):
    from celery_redqueue.ops.dashboard import Dashboard
    from celery_redqueue.ops.reading import Operations

    base = serve(Dashboard(Operations.from_app(app), token=None, refresh=0.5))
    page = browser.new_page()
    page.goto(base + "#pool%3Aevil")
    page.wait_for("document.querySelectorAll('#dead tbody tr').length === 2")
    visible = page.eval(
        "['dead-actions', 'unlock', 'set-rate', 'drain', 'dead-pages']"
        ".filter((id) => document.getElementById(id).getClientRects().length > 0)"
    )
    assert visible == []
    assert page.eval("document.querySelectorAll('#dead input').length") == 0
    assert page.eval("document.getElementById('readonly').getClientRects().length") > 0
    page.screenshot("read-only")


def test_page_explains_its_columns_shows_shed_and_charts_a_burst_per_second(
    dashboard, browser, redqueue_redis, redqueue_prefix
):
    base, _ = dashboard
    full = CappedPool(redqueue_redis, "full", 5, prefix=redqueue_prefix, policy="reject")
    full.add_many(range(8))  # a short burst: 3 rejected
    sampled = CappedPool(redqueue_redis, "sampled", 5, prefix=redqueue_prefix)
    sampled.add_many(range(9))  # 4 rejected or evicted

    page = browser.new_page()
    page.goto(base)
    page.wait_for(cell("pool:full", 1), message="the full pool's row")
    # Dropped per structure, split by reason on hover.
    assert page.eval(cell("pool:full", 11)) == "3"
    assert page.eval(cell("pool:sampled", 11)) == "4"
    split = page.eval(
        "document.querySelector('#structures tr[data-id=\"pool:full\"] td:nth-child(11)').title"
    )
    assert split == "rejected 3"
    # Every column says what it counts (the workers column too), and a legend spells it out.
    titles = page.eval(
        "Object.fromEntries([...document.querySelectorAll('#structures thead th')]"
        ".map((th) => [th.textContent, th.title]))"
    )
    assert list(titles)[-2:] == ["workers", "shed"]
    assert all(titles.values()), titles
    assert "worker processes needed" in titles["workers"]
    assert "workers" in page.eval("document.getElementById('columns-help').textContent")
    # Rows look clickable: a pointer, and the name drawn as a link.
    style = page.eval(
        "(() => { const td = document.querySelector('#structures tr[data-id=\"pool:full\"] td');"
        " const s = getComputedStyle(td); return [s.cursor, s.textDecorationLine]; })()"
    )
    assert style == ["pointer", "underline"], style
    page.eval("document.querySelector('#structures tr[data-id=\"pool:full\"]').click()")
    page.wait_for("document.getElementById('detail-title').textContent === 'pool:full'")
    # All of the hour's traffic is in its last minutes: the chart picks the per-second view.
    page.wait_for("Number(document.getElementById('chart').dataset.points) > 0")
    assert page.eval("document.getElementById('chart').dataset.span") == "minute"
    page.screenshot("columns")
    page.eval(
        "document.getElementById('span').value = 'hour';"
        " document.getElementById('span').dispatchEvent(new Event('change'))"
    )
    page.wait_for("document.getElementById('chart').dataset.span === 'hour'")

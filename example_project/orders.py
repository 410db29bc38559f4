"""The order-events demo: one "order placed" event, three consumers, each at its own position.

A grocery shop publishes each order once on the stream "orders"; three stream tasks (groups)
receive every event: an SMS to the customer, a packing slip, loyalty points. The producer knows
none of them. One order is malformed: its packing slip fails, is retried, and lands in the
dead-letter list; after the "fix" it is requeued for the packing group alone. Then the loyalty
group replays the whole stream, and its processed-guard skips every event (each was applied
once already), so the replay applies nothing; the demo says how to replay for real.

Run it with ``./run-demo orders`` (embedded Redis, a prefork worker and beat as subprocesses).
Ctrl-C or SIGTERM at any moment stops the worker, beat and Redis and removes the temporary files.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

from celery import Celery

from celery_redqueue import publish, stream_task
from celery_redqueue.tasks.config import get_config
from example_project.demo import celery, stop, stoppable, watch_command

ROOT = Path(__file__).resolve().parent.parent
ORDERS = 200

APP = "example_project.orders"
app = Celery(
    APP,
    broker=os.environ.get("REDQUEUE_DEMO_URL", "redis://localhost:6379/0"),
)
app.conf.update(
    redqueue_key_prefix="demo-orders",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def redis():
    return get_config(app).client()


@stream_task(app=app, stream="orders", group="sms")
def send_sms(event):
    """Pretend to text the customer."""
    redis().incr("demo:orders:sms")


@stream_task(
    app=app,
    stream="orders",
    group="packing",
    stream_key="order",  # one order's events in publish order
    stream_max_receives=3,
    stream_retry_delay=0.2,
)
def packing_slip(event):
    """Print a packing slip; an order without an address fails until the bug is fixed."""
    if "address" not in event and not redis().get("demo:orders:fixed"):
        raise ValueError(f"order {event['order']} has no address")
    redis().incr("demo:orders:slips")


@stream_task(app=app, stream="orders", group="loyalty", stream_processed_guard=86_400)
def loyalty_points(event):
    """Points are applied once, even when the event is delivered (or replayed) again."""
    redis().incrby("demo:orders:points", event["total"] // 10)


GROUPS = {"sms": send_sms, "packing": packing_slip, "loyalty": loyalty_points}


def wait(condition, timeout=120):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out: the demo did not settle")
        time.sleep(0.2)


def table():
    print(
        f"  {'group':8} {'processed':>9} {'lag':>5} {'pending':>7} {'dead':>5} "
        f"{'redelivered':>11} {'guard-skipped':>13}"
    )
    for group, task in GROUPS.items():
        f = task.stream.group_figures(group)
        print(
            f"  {group:8} {f.processed:9} {f.lag:5} {f.pending:7} {f.dead:5} "
            f"{f.redelivered:11} {f.guard_skipped:13}"
        )


def settled(expected):
    return all(
        t.stream.group_figures(g).processed + t.stream.group_figures(g).dead >= expected
        and t.stream.group_figures(g).pending == 0
        for g, t in GROUPS.items()
    )


def main(log):
    from celery_redqueue.embedded import EmbeddedRedis

    with EmbeddedRedis() as server, tempfile.TemporaryDirectory(prefix="redqueue-orders-") as tmp:
        print(f"embedded Redis at {server.url}")
        log.announce()
        watch_command({"REDQUEUE_DEMO_URL": server.url}, app=APP)
        os.environ["REDQUEUE_DEMO_URL"] = server.url
        app.conf.broker_url = server.url
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        where = {"env": env, "cwd": tmp, "log": log}
        procs = [
            celery("worker", "-P", "prefork", "-c", "2", "-l", "info", **where, app=APP),
            celery("beat", "--max-interval=1", "-s", f"{tmp}/beat", **where, app=APP),
        ]
        try:
            events = [
                {"order": i, "total": 100 + i, "address": f"{i} Main St"} for i in range(ORDERS)
            ]
            del events[42]["address"]  # the malformed order
            started = time.perf_counter()
            for event in events:
                publish(app, "orders", event)
            elapsed = time.perf_counter() - started
            broker = app.connection().default_channel.client.llen("celery")
            print(
                f"published {ORDERS} 'order placed' events in {elapsed:.2f}s for 3 groups "
                f"(sms, packing, loyalty); broker queue right after: {broker} drain job(s)"
            )
            wait(lambda: settled(ORDERS))
            print(f"  (settled {time.perf_counter() - started:.1f}s after the first publish)")
            print("every group has read every event:")
            table()
            (letter,) = packing_slip.stream.dead_letters()
            print(
                f"dead letter for {letter.key!r} after {letter.receives} deliveries: {letter.error}"
            )
            expected_points = sum(e["total"] // 10 for e in events)
            redis().set("demo:orders:fixed", 1)
            print("bug fixed; requeueing the dead letter for the packing group only...")
            packing_slip.requeue_dead()
            wait(lambda: int(redis().get("demo:orders:slips") or 0) == ORDERS)
            print(f"  (requeued letter done {time.perf_counter() - started:.1f}s in)")
            print("loyalty replays the whole stream (seek to the start)...")
            loyalty_points.stream.seek("loyalty", "start")
            loyalty_points.send_drain()
            wait(lambda: loyalty_points.stream.group_figures("loyalty").guard_skipped == ORDERS)
            table()
            skipped = loyalty_points.stream.group_figures("loyalty").guard_skipped
            print(
                f"the replay read all {ORDERS} events again and the processed guard skipped "
                f"{skipped} of them\n(each had been applied once), so the replay applied no "
                "points at all."
            )
            print(
                "to replay for real (apply every event again, say after fixing how points are "
                "computed\nand resetting them), read with a group the guard has not seen: a new "
                "group, e.g.\n@stream_task(stream='orders', group='loyalty-v2'), seeked to "
                "'start'; or seek this group\nonce its guard window (stream_processed_guard="
                "86400 s) has passed."
            )
            sms = int(redis().get("demo:orders:sms"))
            slips = int(redis().get("demo:orders:slips"))
            points = int(redis().get("demo:orders:points"))
            print(
                f"SMS sent {sms}, packing slips {slips}, "
                f"points {points} (expected {expected_points})"
            )
            ok = sms == ORDERS and slips == ORDERS and points == expected_points
            print("done: each group handled each order once." if ok else "MISMATCH")
            return 0 if ok else 1
        finally:
            for proc in procs:
                stop(proc)


def run():
    """main(), stopped cleanly (worker, beat, Redis, temporary files) by Ctrl-C or SIGTERM."""
    return stoppable("orders", main)


if __name__ == "__main__":
    sys.exit(run())

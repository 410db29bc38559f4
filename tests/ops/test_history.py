"""The per-minute history kept by the structures' own scripts (the flow rings)."""

import time

from celery_redqueue.structures.figures import HOUR, WINDOW


def test_minute_ring_counts_in_and_out_and_depth(make_pool):
    pool = make_pool(capacity=1000, policy="newest")
    pool.add_many(range(120))
    pool.ack(pool.pop(30))
    history = pool.figures().history
    assert len(history.minute_starts) == HOUR and len(history.second_starts) == WINDOW
    assert history.minute_starts == sorted(history.minute_starts)
    # Everything happened within a second or two: in the last minute slot, or the one before.
    assert sum(history.minutes_in[-2:]) == 120 and sum(history.minutes_out[-2:]) == 30
    assert sum(history.minutes_in) == 120 and sum(history.seconds_in) == 120
    # Depth is a level: the reading itself recorded what it saw this minute.
    assert history.minutes_depth[-1] == 90
    assert all(d is None for d in history.minutes_depth[:-2])


def away_from_a_minute_turn(client):
    """Wait (at most 3 s) until the server's minute has at least 3 s left to run."""
    seconds, _ = client.time()
    if seconds % 60 >= 57:
        time.sleep(60 - seconds % 60 + 0.1)


def test_depth_slot_keeps_the_deepest_reading_of_the_minute(make_pool, redqueue_redis):
    pool = make_pool(capacity=1000)
    away_from_a_minute_turn(redqueue_redis)
    pool.add_many(range(50))
    assert pool.figures().history.minutes_depth[-1] == 50
    pool.ack(pool.pop(40))
    assert pool.figures().depth == 10
    assert pool.figures().history.minutes_depth[-1] == 50  # the minute's deepest, not the last


def test_minute_fields_outside_the_hour_are_not_shown(make_pool, redqueue_redis):
    pool = make_pool(capacity=10)
    away_from_a_minute_turn(redqueue_redis)
    pool.add(1)
    now_min = int(redqueue_redis.time()[0] // 60)
    flow = pool.keys("flow")
    redqueue_redis.hset(flow, f"in:m{now_min - 2}", 7)
    redqueue_redis.hset(flow, f"out:m{now_min - 59}", 5)
    redqueue_redis.hset(flow, f"in:m{now_min - 117}", 9)
    # A second field of two minutes ago (not rolled yet) counts in its minute.
    redqueue_redis.hset(flow, f"in:{(now_min - 2) * 60 + 5}", 3)
    history = pool.figures().history
    assert history.minutes_in[-3] == 7 + 3
    assert history.minutes_out[0] == 5  # 59 minutes ago: the oldest minute shown
    assert sum(history.minutes_in) == 1 + 7 + 3  # the 117-minute-old field is not shown
    # Minute fields are history only: rates use the seconds of the last minute.
    assert pool.figures().rate_in == 1 / 60


def test_seconds_roll_into_minutes_and_old_fields_are_dropped(make_pool, redqueue_redis):
    pool = make_pool(capacity=10_000)
    away_from_a_minute_turn(redqueue_redis)
    now_sec = int(redqueue_redis.time()[0])
    now_min = now_sec // 60
    flow = pool.keys("flow")
    old_seconds = [(now_min - 3) * 60 + s for s in (1, 2, 59)]
    for sec in old_seconds:
        redqueue_redis.hset(flow, f"in:{sec}", 4)
    redqueue_redis.hset(flow, f"in:m{now_min - 3}", 1)  # already rolled earlier: added to
    redqueue_redis.hset(flow, f"in:m{now_min - 61}", 8)  # over an hour old
    redqueue_redis.hset(flow, "in:3", "1000 5")  # the old ring's shape
    redqueue_redis.hset(flow, f"in:{now_sec - 1}", 2)  # the last minute: kept as it is
    pool.add(1)  # the first tick of this second rolls
    fields = {k.decode(): float(v) for k, v in redqueue_redis.hgetall(flow).items()}
    assert fields[f"in:m{now_min - 3}"] == 1 + 3 * 4
    assert not any(f"in:{sec}" in fields for sec in old_seconds)
    assert f"in:m{now_min - 61}" not in fields and "in:3" not in fields
    assert fields[f"in:{now_sec - 1}"] == 2
    assert sum(pool.figures().history.minutes_in) == 1 + 12 + 2 + 1


def test_bucket_history_and_ring_bound(make_bucket, redqueue_redis):
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue_many([(f"k{i % 5}", i) for i in range(40)])
    reservation = bucket.dequeue().reservation
    bucket.commit(reservation)
    history = bucket.figures().history
    assert sum(history.minutes_in) == 40 and sum(history.minutes_out) == 1
    assert history.minutes_depth[-1] == 39
    # Bounded: per kind at most 60 per-second and 60 per-minute slots.
    assert redqueue_redis.hlen(bucket.keys("flow")) <= 4 * (WINDOW + HOUR) + HOUR


def test_rolling_runs_once_a_minute(make_pool, redqueue_redis):
    pool = make_pool(capacity=10_000)
    away_from_a_minute_turn(redqueue_redis)
    now_min = int(redqueue_redis.time()[0]) // 60
    flow = pool.keys("flow")
    old_second = f"in:{(now_min - 5) * 60}"
    redqueue_redis.hset(flow, mapping={old_second: 3, "rolled": now_min})
    pool.add(1)  # this minute was rolled already: the hash is not read again
    assert redqueue_redis.hget(flow, old_second) == b"3"
    redqueue_redis.hset(flow, "rolled", now_min - 1)
    redqueue_redis.hdel(flow, f"in:{int(redqueue_redis.time()[0])}")  # a new second's first tick
    pool.add(2)
    assert not redqueue_redis.hexists(flow, old_second)
    assert float(redqueue_redis.hget(flow, f"in:m{now_min - 5}")) == 3
    assert int(redqueue_redis.hget(flow, "rolled")) == now_min

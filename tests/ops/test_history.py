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


def test_stale_slots_of_an_earlier_lap_read_as_zero(make_pool, redqueue_redis):
    pool = make_pool(capacity=10)
    pool.add(1)
    now_min = int(time.time() // 60)
    # A slot written exactly one lap (60 minutes) ago sits in the field this minute would use
    # next lap; one written 2 minutes ago is still in range.
    redqueue_redis.hset(pool.keys("flow"), f"in:m{(now_min - 2) % 60}", f"{now_min - 2} 7")
    redqueue_redis.hset(pool.keys("flow"), f"out:m{(now_min + 1) % 60}", f"{now_min - 59} 5")
    redqueue_redis.hset(pool.keys("flow"), f"in:m{(now_min + 3) % 60}", f"{now_min - 117} 9")
    history = pool.figures().history
    assert history.minutes_in[-3] == 7
    assert history.minutes_out[0] == 5  # 59 minutes ago: the oldest slot shown
    assert sum(history.minutes_in) == 1 + 7  # the 117-minute-old slot is not shown
    # The per-second ring and the per-minute ring do not mix: rates use seconds only.
    assert pool.figures().rate_in == 1 / 60


def test_bucket_history_and_ring_bound(make_bucket, redqueue_redis):
    bucket = make_bucket(default_rate="1000/s")
    bucket.enqueue_many([(f"k{i % 5}", i) for i in range(40)])
    reservation = bucket.dequeue()
    bucket.commit(reservation)
    history = bucket.figures().history
    assert sum(history.minutes_in) == 40 and sum(history.minutes_out) == 1
    assert history.minutes_depth[-1] == 39
    # Bounded: per kind at most 60 per-second and 60 per-minute slots.
    assert redqueue_redis.hlen(bucket.keys("flow")) <= 4 * (WINDOW + HOUR) + HOUR

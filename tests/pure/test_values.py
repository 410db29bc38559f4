"""Pure functions: rates, figures arithmetic, settings, option checks, key names. No Redis."""

import math

import pytest
from celery import Celery

from celery_redqueue import ConfigurationError, parse_rate
from celery_redqueue.redis.keys import StructureKeys, normalize_prefix, validate_name
from celery_redqueue.structures.figures import compute, ring_sums, unfold
from celery_redqueue.tasks.config import load_config
from celery_redqueue.validation import count, one_of, optional_seconds, positive_int, seconds


@pytest.mark.parametrize(
    ("rate", "interval_ms"),
    [
        ("10/s", 100.0),
        ("100/m", 600.0),
        ("5/h", 720_000.0),
        ("0.5/s", 2000.0),
        (4, 250.0),
        ("2", 500.0),
    ],
)
def test_parse_rate(rate, interval_ms):
    assert parse_rate(rate) == pytest.approx(interval_ms)


@pytest.mark.parametrize("rate", ["0/s", "-1/s", "ten/s", "10/w", True, None, 0, math.nan])
def test_parse_rate_refuses(rate):
    with pytest.raises(ConfigurationError):
        parse_rate(rate)


def test_ring_sums_keep_only_the_last_minute():
    now_ms = 1_000_000.0  # second 1000
    flow = {
        b"in:1000": b"5",  # this second
        b"in:941": b"2",  # 59 s ago: inside
        b"in:940": b"7",  # 60 s ago: outside
        b"in:m15": b"40",  # a minute field: history, not rates
        b"out:999": b"3",
        b"in:3": b"1000 5",  # the old ring's "stamp value" shape: skipped
        b"busy:1000": b"0.25",
    }
    assert ring_sums(flow, now_ms) == {"in": 7.0, "out": 3.0, "busy": 0.25}


def test_last_minute_weighs_the_previous_minute_and_takes_totals_from_receives():
    from celery_redqueue.structures.bucket_types import _last_minute

    # 15 s into minute 2: 10 releases this minute (receives 40, 30 at the minute's start) and
    # 12 last minute, weighted by 45/60.
    totals = [b"2", b"40", b"30", b"12"]
    loads = _last_minute(135.0, [("a", 6.0), ("b", 4.0)], [("a", 12.0)], totals)
    assert loads == {"a": (15.0, round(15 / 19, 4)), "b": (4.0, round(4 / 19, 4))}
    # Nothing released yet this minute: the stored minute is the previous one.
    assert _last_minute(195.0, [("a", 6.0)], [("a", 12.0)], totals) == {"a": (4.5, 0.6)}
    assert _last_minute(255.0, [("a", 6.0)], [], totals) == {}  # older: nothing counts
    assert _last_minute(135.0, [], [], [None, None, None, None]) == {}


def test_unfold_adds_a_folded_counter_to_each_counter_it_names():
    counters = {"offered+accepted+depth": 5, "offered": 2, "rejected": 2, "seq": 7}
    assert unfold(counters) == {"offered": 7, "accepted": 5, "depth": 5, "rejected": 2, "seq": 7}


def test_compute_figures():
    figures = compute(
        depth=120,
        in_flight=30,
        dead=1,
        delayed=2,
        offered=1000,
        processed=800,
        shed=47,
        sums={"in": 600.0, "out": 300.0, "done": 300.0, "busy": 150.0},
        oldest_ms=10_000.0,
        now_ms=12_500.0,
    )
    assert figures.rate_in == 10.0 and figures.rate_out == 5.0
    assert figures.drain_eta == 30.0  # (120 + 30) / 5
    assert figures.seconds_per_item == 0.5
    assert figures.workers_needed == 5.0  # 10/s x 0.5 s
    assert figures.oldest_age == 2.5


def test_compute_figures_without_flow():
    idle = compute(
        depth=0,
        in_flight=0,
        dead=0,
        delayed=0,
        offered=0,
        processed=0,
        shed=0,
        sums={},
        oldest_ms=None,
        now_ms=0.0,
    )
    assert idle.drain_eta == 0.0 and idle.oldest_age is None and idle.workers_needed is None
    stuck = compute(
        depth=5,
        in_flight=0,
        dead=0,
        delayed=0,
        offered=5,
        processed=0,
        shed=0,
        sums={},
        oldest_ms=None,
        now_ms=0.0,
    )
    assert stuck.drain_eta is None  # nothing goes out: no estimate, not zero


def _conf(**settings):
    app = Celery("pure", set_as_current=False)
    app.conf.update(settings)
    return app.conf


def test_config_falls_back_to_a_redis_broker():
    config = load_config(_conf(broker_url="redis://h:1/0"))
    assert config.url == "redis://h:1/0" and config.key_prefix == "redqueue"
    assert config.beat is True and config.reaper_interval == 30.0
    assert config.watchdog_interval == 2.0


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"broker_url": "amqp://h//"}, "redqueue_url"),
        ({"redqueue_url": "http://h"}, "redqueue_url"),
        ({"redqueue_url": "redis://h", "redqueue_reaper_interval": 0}, "redqueue_reaper_interval"),
        (
            {"redqueue_url": "redis://h", "redqueue_redis_options": "timeout=1"},
            "redqueue_redis_options",
        ),
        ({"redqueue_url": "redis://h", "redqueue_key_prefix": "a{b"}, "redqueue_key_prefix"),
        (
            {"redqueue_url": "redis://h", "redqueue_watchdog_interval": -1},
            "redqueue_watchdog_interval",
        ),
    ],
)
def test_config_errors_name_the_setting(settings, named):
    with pytest.raises(ConfigurationError, match=named):
        load_config(_conf(**settings))


def test_validation_speaks_the_callers_vocabulary():
    with pytest.raises(ConfigurationError, match=r"^pool_size must be a positive integer"):
        positive_int("pool_size", 0)
    with pytest.raises(ConfigurationError, match=r"^capacity must be"):
        positive_int("capacity", 1.5)
    assert positive_int("n", None, optional=True) is None
    assert seconds("t", 0) == 0.0
    for bad in (-1, math.nan, math.inf, True, "1"):
        with pytest.raises(ConfigurationError):
            seconds("t", bad)
    with pytest.raises(ConfigurationError):
        seconds("t", 0, positive=True)
    assert optional_seconds("t", None) is None
    assert count("c", 0) == 0
    with pytest.raises(ConfigurationError, match="policy must be one of"):
        one_of("policy", "newset", ("sample", "newest"))


def test_keys_share_one_hash_tag():
    keys = StructureKeys("app:", "pool", "events")
    assert keys("items") == "app:{pool:events}:items"
    assert normalize_prefix(" app:: ") == "app"
    for bad in ("", "a{b", "a}b", None):
        with pytest.raises(ConfigurationError):
            validate_name(bad, "pool_name")

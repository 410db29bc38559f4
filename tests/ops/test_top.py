"""`redqueue top`'s frame over real structures: every column an operator reads, one row each."""

from pathlib import Path

from celery_redqueue import CappedPool
from celery_redqueue.ops.reading import Operations
from celery_redqueue.ops.top import frame
from celery_redqueue.structures.figures import Figures


def columns(lines, name):
    """The header's column names and the row of structure ``name``, split on spaces."""
    header = next(line for line in lines if line.startswith("structure"))
    row = next(line for line in lines if line.split()[:1] == [name])
    return header.split()[: len(header.split()) - 3], row.split()  # "in, last minute" aside


def test_top_shows_what_each_pool_shed(redqueue_redis, redqueue_prefix):
    full = CappedPool(redqueue_redis, "full", 5, policy="reject", prefix=redqueue_prefix)
    full.add_many(range(8))
    ring = CappedPool(redqueue_redis, "ring", 4, policy="newest", prefix=redqueue_prefix)
    ring.add_many(range(10))
    lines = frame(Operations(redqueue_redis, redqueue_prefix).overview(history=True))
    for pool, dropped in ((full, 3), (ring, 6)):
        assert pool.figures().shed == dropped  # rejected, evicted: counted exactly
        names, row = columns(lines, f"pool:{pool.name}")
        assert dict(zip(names[1:], row[1:], strict=False))["shed"] == str(dropped)


def test_the_operations_page_shows_tops_columns():
    """docs/operations.md's sample frame has the header `top` draws for its names."""
    page = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    sample = page.split("```text\nredqueue top")[1].split("```")[0].splitlines()
    header = next(line for line in sample if line.startswith("structure"))
    kinds = ("pool:", "bucket:", "stream:", "lease:")
    rows = [line.split()[0] for line in sample if line.startswith(kinds)]
    assert len(rows) == 4
    counts = dict.fromkeys(("depth", "in_flight", "dead", "delayed", "offered", "processed"), 0)
    seconds = dict.fromkeys(("oldest_age", "drain_eta", "seconds_per_item", "workers_needed"))
    zeros = Figures(**counts, shed=0, rate_in=0.0, rate_out=0.0, **seconds)
    views = [{"id": name, "figures": zeros} for name in rows]
    drawn = frame({"time": 0, "prefix": "redqueue", "warnings": [], "structures": views})
    assert header in drawn

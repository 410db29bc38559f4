"""Issue 18, problem 4: one call that kills its process is isolated. A batch of 8 calls of an
at-least-once pool (per-call body, batch body) or stream group holds one call whose body
kills its prefork child (``os._exit``). The batch comes back from the dead worker; only the
poison call may reach the dead letters, every good call runs, and none runs more than twice
(once maybe in the dead batch, once on its own). Main handed the returned calls out together
again, so the poison call killed its batch each time: the whole batch was dead-lettered and
good calls ran three times."""

from collections import Counter

import pytest

pytestmark = pytest.mark.timeout(240)

GOOD = [f"good-{i}" for i in range(7)]


@pytest.fixture
def poison_app(redqueue_server_url, redqueue_prefix, monkeypatch):
    """tests.faults.poison_app imported in this process, on the test's prefix (as a producer)."""
    from tests.faults.conftest import _imported

    yield from _imported(
        "tests.faults.poison_app", redqueue_server_url, redqueue_prefix, monkeypatch
    )


def letter_call(kind, letter):
    """The call a dead letter holds: a pool's stored [args, kwargs], a stream's event."""
    if kind == "stream":
        return letter.payload["call"]
    return letter.payload[0][0]


@pytest.mark.parametrize("kind", ["per_call", "batch_body", "stream"])
def test_only_the_call_that_kills_its_process_is_dead_lettered(
    kind, poison_app, celery_procs, redqueue_redis, redqueue_prefix, wait_for, worker_logs
):
    task = getattr(poison_app, kind)
    structure = task.structure
    calls = [*GOOD[:3], poison_app.POISON, *GOOD[3:]]
    # Stored before any worker runs: the first pop takes all 8 as one batch.
    for call in calls:
        if kind == "stream":
            poison_app.stream_publish(call)
        else:
            task.delay(call)
    celery_procs("tests.faults.poison_app", "worker", "-B", "--pool=prefork", "--concurrency=1")
    ran_key = f"{redqueue_prefix}:ran:{kind}"

    def settled():
        if kind == "stream":
            figures = structure.group_figures("g")
            return figures.pending == 0 and figures.lag == 0 and structure.dead_letters()
        stats = structure.stats()
        return stats.depth == 0 and stats.in_flight == 0 and stats.dead > 0

    try:
        wait_for(settled, timeout=180, message="the batch settled (nothing waiting or held)")
        ran = Counter(x.decode() for x in redqueue_redis.lrange(ran_key, 0, -1))
        dead = [letter_call(kind, letter) for letter in structure.dead_letters()]
        print(kind, "ran:", dict(ran), "dead:", dead)
        assert dead == [poison_app.POISON]
        assert {call: n for call, n in ran.items() if call in GOOD and 1 <= n <= 2} == {
            call: ran[call] for call in GOOD
        }, ran
        assert ran[poison_app.POISON] == 3  # max_receives: it killed its process each time
    except AssertionError:
        print(worker_logs())
        raise

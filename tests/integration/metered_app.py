"""Bucket tasks for metered APIs, run by `celery worker -c 4` subprocesses in
test_metered_tasks.py. Each body records (key, item, cost, start, end) where the test reads
it; ``python -m tests.integration.metered_app TASK N`` produces a test's calls through
``.delay()``, the call path users take.

Configured from the environment: REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX.
"""

import json
import random
import sys
import time
import urllib.request

from celery_redqueue import BucketTask, KeyBackoff
from tests.process_app import PREFIX, client, make_app

app = make_app("metered_app")
app.conf.redqueue_reaper_interval = 1.0
COMMON = {"base": BucketTask, "bind": True, "bucket_key": "tenant", "bucket_drain_concurrency": 4}


def record(task, tenant, i, cost, started):
    """What ran: its key, item, cost, the server time it was released at (the script's clock,
    kept in the reservation), the body's server time, and its receives."""
    held = task.reservation
    seconds, micros = client().time()
    row = {"tenant": tenant, "i": i, "cost": cost, "start": started, "end": time.time()}
    row.update(released=held.released_at, receives=held.receives, body=seconds + micros / 1e6)
    client().rpush(f"{PREFIX}:{task.name.rsplit('.', 1)[1]}", json.dumps(row))


@app.task(**COMMON, bucket_rate="10/s", bucket_cost="tokens", bucket_cost_rate="30/s")
def metered(self, tenant, i, tokens):
    # Every third call used fewer tokens than estimated: a refund, at its commit.
    used = tokens - 1 if i % 3 == 0 and tokens > 1 else tokens
    if used != tokens:
        self.report_cost(used)
    record(self, tenant, i, used, time.time())


@app.task(**COMMON, bucket_rate="1000/s", bucket_cost="tokens", bucket_cost_rate="300/s")
def tokens(self, tenant, i, tokens):
    record(self, tenant, i, tokens, time.time())


@app.task(**COMMON, bucket_rate="20/s", bucket_max_receives=1)
def backoff(self, tenant, i):
    started = time.time()
    if tenant == "limited" and i == 0 and client().incr(f"{PREFIX}:backoffs") == 1:
        client().rpush(f"{PREFIX}:backed-off", json.dumps(self.reservation.released_at))
        raise KeyBackoff(2)
    record(self, tenant, i, 0, started)


def held_slot(task, tenant, i, *, hang=False):
    """A body that holds its key's slot for 0.3 s (600 s when ``hang``), counting the bodies of
    the key running at once (``running-seen``: what each body saw as it started)."""
    started = time.time()
    running = client().incr(f"{PREFIX}:running:{tenant}")
    client().rpush(f"{PREFIX}:running-seen:{tenant}", running)
    time.sleep(600 if hang else 0.3)
    client().decr(f"{PREFIX}:running:{tenant}")
    record(task, tenant, i, 0, started)


@app.task(**COMMON, bucket_rate="1000/s", bucket_concurrency=2)
def concurrent(self, tenant, i):
    held_slot(self, tenant, i)


#: Enough calls that many are left when the test's second process (a few seconds to start on a
#: busy machine, while 2 bodies of 0.3 s run at a time) raises the key's concurrency.
ADJUSTABLE_CALLS = 60


@app.task(**COMMON, bucket_rate="1000/s", bucket_concurrency=2, name=f"{__name__}.adjustable")
def adjustable(self, tenant, i):
    # Each body holds its slot until the limit the test expects (``expect:a``, 2 until the test
    # raises it) has been reached once, or 20 s: however slow the machine, a limit the bucket
    # allows is reached, and one it never allows leaves the bodies timing out below it.
    started = time.time()
    expected = int(client().get(f"{PREFIX}:expect:{tenant}") or 2)
    running = client().incr(f"{PREFIX}:running:{tenant}")
    client().rpush(f"{PREFIX}:running-seen:{tenant}", running)
    if running >= expected:
        client().set(f"{PREFIX}:reached:{tenant}:{expected}", 1)
    deadline = time.time() + 20
    while not client().exists(f"{PREFIX}:reached:{tenant}:{expected}") and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # long enough for one more body to start, if the bucket allowed it
    client().decr(f"{PREFIX}:running:{tenant}")
    record(self, tenant, i, 0, started)


#: bucket_concurrency alone: its drain concurrency follows it (no bucket_drain_concurrency).
ALONE = {"base": BucketTask, "bind": True, "bucket_key": "tenant", "bucket_rate": "1000/s"}


@app.task(**ALONE, bucket_concurrency=2, bucket_visibility_timeout=2.0)
def alone(self, tenant, i):
    # The first two calls' first runs hang when asked: the test kills their worker.
    hang = i < 2 and self.reservation.receives == 1 and bool(client().get(f"{PREFIX}:hang"))
    held_slot(self, tenant, i, hang=hang)


@app.task(**COMMON, bucket_rate="1000/s")
def pausable(self, tenant, i):
    record(self, tenant, i, 0, time.time())


@app.task(**COMMON, bucket_rate="100/s", bucket_total_rate="10/s")
def total(self, tenant, i):
    record(self, tenant, i, 0, time.time())


def fetch(self, tenant, i, url):
    """A call to the test's loopback server after a random delay of up to 0.1 s (what a real
    path to an upstream adds between a release and its arrival, and how it varies)."""
    time.sleep(random.uniform(0, 0.1))
    with urllib.request.urlopen(f"{url}/{tenant}/{i}", timeout=10) as response:
        response.read()
    record(self, tenant, i, 0, time.time())


# The same calls to an upstream that allows 10 a second, with and without a margin of 0.25 s.
margined = app.task(**COMMON, bucket_rate="10/s", bucket_margin=0.25, name=f"{__name__}.margined")(
    fetch
)
exact = app.task(**COMMON, bucket_rate="10/s", name=f"{__name__}.exact")(fetch)


@app.task(**COMMON, bucket_rate="1000/s", bucket_total_rate="20/s", name=f"{__name__}.weighted")
def weighted(self, tenant, i):
    record(self, tenant, i, 0, time.time())


#: What each test produces: (args, kwargs) of every call.
CALLS = {
    "metered": [
        ((tenant, i), {"tokens": [2, 8, 4, 12, 6][i % 5] + (tenant == "b")})
        for i in range(30)
        for tenant in ("a", "b")
    ],
    # Two seconds' worth of 60-token calls for an idle key, and a mix of 5 and 60.
    "tokens": [(("edge", i), {"tokens": 60}) for i in range(10)]
    + [(("mixed", i), {"tokens": [5, 60, 5, 5, 60, 5][i % 6]}) for i in range(24)],
    "backoff": [((tenant, i), {}) for i in range(10) for tenant in ("limited", "free")],
    "concurrent": [(("a", i), {}) for i in range(8)] + [(("b", i), {}) for i in range(2)],
    "alone": [(("a", i), {}) for i in range(8)],
    "pausable": [((tenant, i), {}) for i in range(5) for tenant in ("held", "open")],
    "total": [((tenant, i), {}) for i in range(15) for tenant in ("a", "b", "c")],
    "weighted": [((tenant, i), {}) for i in range(40) for tenant in ("a", "b", "c")],
    "adjustable": [(("a", i), {}) for i in range(ADJUSTABLE_CALLS)],
    "margined": [(("a", i), {}) for i in range(30)],
    "exact": [(("a", i), {}) for i in range(30)],
}


def produce(name, action="", url=""):
    """Store a test's calls through ``.delay()`` (after pausing "held", if asked), or resume
    "held" (the task's bucket sends the drain job that needs)."""
    task = app.tasks[f"tests.integration.metered_app.{name}"]
    if action == "resume":
        task.bucket.resume("held")
        return
    if action == "weights":  # 1 (a, the default), 2, 3
        task.bucket.set_weight("b", 2)
        task.bucket.set_weight("c", 3)
    if action.startswith("concurrency="):  # at runtime, through the task's bucket
        task.bucket.set_concurrency("a", int(action.split("=")[1]))
        return
    if action == "pause":
        task.bucket.pause("held")
    if action == "edge":  # store them 0.6 s into a second of the server's clock
        while not 0.6 <= client().time()[1] / 1e6 < 0.65:
            time.sleep(0.002)
    for args, kwargs in CALLS[name]:
        task.delay(*args, *((url,) if url else ()), **kwargs)


if __name__ == "__main__":
    # Imported by its name, so the tasks' names are the worker's.
    from tests.integration import metered_app

    metered_app.produce(*sys.argv[1:4])

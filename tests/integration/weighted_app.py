"""A bucket task for test_weighted_slots.py, run by a `celery worker -c 2` subprocess: two drain
slots for three busy keys. Each body records the server time its call was released at and its
key. ``python -m tests.integration.weighted_app WEIGHTS CALLS`` (weights as JSON, e.g.
``{"a": 1, "b": 2}``) gives the keys their weights and stores CALLS calls per key through
``.delay()``, interleaved.

Configured from the environment: REDQUEUE_TEST_URL and REDQUEUE_TEST_PREFIX.
"""

import json
import sys

from celery_redqueue import BucketTask
from tests.process_app import PREFIX, client, make_app

app = make_app("weighted_app")


@app.task(
    base=BucketTask,
    bind=True,
    bucket_key="tenant",
    bucket_rate="10000/s",
    bucket_drain_concurrency=2,
    name=f"{__name__}.weighted",
)
def weighted(self, tenant, i):
    row = {"released": self.reservation.released_at, "tenant": tenant}
    client().rpush(f"{PREFIX}:weighted", json.dumps(row))


def produce(weights, calls):
    for key, weight in weights.items():
        if weight > 1:
            weighted.bucket.set_weight(key, weight)
    for i in range(calls):
        for key in weights:
            weighted.delay(key, i)


if __name__ == "__main__":
    # Imported by its name, so the task's name is the worker's.
    from tests.integration import weighted_app

    weighted_app.produce(json.loads(sys.argv[1]), int(sys.argv[2]))

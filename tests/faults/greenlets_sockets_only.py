"""Run by test_producer_pools: greenlets of one thread with gevent's sockets but not its
threading (``patch_all(thread=False)``, ``patch_socket()``): a thread-local held connection is
then shared by every greenlet of the thread, and a greenlet waiting for its reply yields to
others. Prints what went wrong as JSON. Usage: python greenlets_sockets_only.py URL PREFIX"""

from gevent import monkey

monkey.patch_socket()

import json  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402

from celery_redqueue.structures.pool import CappedPool  # noqa: E402

GREENLETS, CALLS = 10, 20

client = redis.Redis.from_url(sys.argv[1], socket_timeout=10)
pool = CappedPool(client, "p", 100_000, prefix=sys.argv[2])
pool.add("warm")  # the main greenlet holds a connection: the one the others would share
wrong: list[str] = []


def produce(i: int) -> None:
    for j in range(CALLS):
        n = 1 + (i + j) % 4
        try:
            results = pool.add_many([f"{i}:{j}:{k}" for k in range(n)])
        except Exception as exc:  # reported to the test
            wrong.append(f"{type(exc).__name__}: {exc}")
        else:
            if len(results) != n or not all(r.kept for r in results):
                wrong.append(f"{n} calls, {len(results)} results")


gevent.joinall([gevent.spawn(produce, i) for i in range(GREENLETS)], timeout=60)
expected = 1 + sum(1 + (i + j) % 4 for i in range(GREENLETS) for j in range(CALLS))
print(json.dumps({"wrong": wrong, "offered": pool.stats().offered, "expected": expected}))

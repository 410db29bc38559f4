"""How far a reader follows one call through the package: functions, modules and module switches.

Traces (``sys.setprofile``) a warm pooled ``.delay()`` and a drain of one stored call against an
embedded Redis server, counting only frames whose code lives in ``celery_redqueue``: each
package function entered, the modules they live in, and how often consecutive package calls
change module (a *switch*: what a reader following the call meets as "now open another file").
Celery, kombu and redis-py frames are left out, so a switch through Celery between two package
modules still counts as one.

    .venv/bin/python bench/call_path.py          # the table
    .venv/bin/python bench/call_path.py --list   # and each path, module by module

It prints figures, it asserts nothing; the targets (a warm ``.delay()`` at most 15 switches, a
drain of one call at most 40) are read from its output.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

from celery import Celery

import celery_redqueue
from celery_redqueue import PoolTask
from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.testing import celery_test_config

PACKAGE = str(Path(celery_redqueue.__file__).resolve().parent)


def trace(run: Callable[[], object]) -> list[tuple[str, str]]:
    """(module, function) of every package function entered while ``run`` runs, in order."""
    entered: list[tuple[str, str]] = []

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            module = frame.f_globals.get("__name__", "?")
            code = frame.f_code
            entered.append((module, getattr(code, "co_qualname", code.co_name)))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return entered


def figures(entered: list[tuple[str, str]]) -> tuple[int, int, int]:
    """(functions entered, distinct modules, module switches)."""
    switches = sum(1 for a, b in itertools.pairwise(entered) if a[0] != b[0])
    return len(entered), len({m for m, _ in entered}), switches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print each path, module by module")
    args = parser.parse_args(argv)

    with EmbeddedRedis() as server:
        app = Celery("call-path", set_as_current=False)
        app.conf.update(celery_test_config(server.url, "call-path"))

        @app.task(base=PoolTask, pool_size=1000, pool_drain_interval=None, pool_drain_linger=0)
        def record(n: int) -> None:
            pass

        app.finalize()
        record.delay(0)  # the cold call: scripts loaded, connections made, options resolved
        record.drain()
        paths = {
            "warm pooled .delay()": trace(lambda: record.delay(1)),
            "second warm .delay()": trace(lambda: record.delay(2)),
        }
        record.drain()
        record.delay(3)
        paths["drain of one call"] = trace(record.drain)
        app.close()

    print(f"{'path':<24}{'functions':>10}{'modules':>9}{'switches':>10}")
    for name, entered in paths.items():
        functions, modules, switches = figures(entered)
        print(f"{name:<24}{functions:>10}{modules:>9}{switches:>10}")
    if args.list:
        for name, entered in paths.items():
            print(f"\n{name}:")
            last = None
            for module, function in entered:
                if module != last:
                    print(f"  {module}")
                    last = module
                print(f"      {function}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

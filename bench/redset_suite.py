"""Run redset's own test suite against celery_redqueue's sorted sets, through a names-only shim.

redset (https://github.com/percolate/redset) is not vendored: pass a clone or a bare git
directory of it. Its tests and its ``redset/serializers.py`` are copied into a temp dir, next to
a ``redset`` package whose modules only re-export names from celery_redqueue:

    redset.SortedSet / TimeSortedSet / ScheduledSet  -> celery_redqueue's classes
    redset.interfaces.Serializer                      -> celery_redqueue.Serializer
    redset.exceptions.LockTimeout                     -> celery_redqueue.RedQueueError
    redset.serializers                                -> redset's own file, unchanged

redset's tests call ``redis.Redis()`` (localhost:6379); the shim points that default at a
throwaway embedded server instead, so nothing else's Redis is touched, and maps
``assertEquals`` to ``assertEqual`` (gone in Python 3.12).

    git clone https://github.com/percolate/redset /tmp/redset
    .venv/bin/python bench/redset_suite.py /tmp/redset
    .venv/bin/python bench/redset_suite.py --str /tmp/redset   # serializer="str" by default

Expected failures, each a deliberate difference documented in docs/guides/sets.md: the tests of
redset's private lock (``lock_timeout``/``lock_expires`` and ``.lock``: these sets pop in one
atomic step and have no lock), the tests of redset's default ``str`` serializer (JSON here;
``serializer="str"`` gives redset's), and ``test_cant_deserialize`` (an undecodable member is
reported with ``UndecodableItemsError``, never dropped with a log line).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from celery_redqueue.embedded import EmbeddedRedis

SHIM = {
    "redset/__init__.py": "from celery_redqueue import ScheduledSet, SortedSet, TimeSortedSet\n",
    "redset/interfaces.py": "from celery_redqueue import Serializer\n",
    "redset/exceptions.py": "from celery_redqueue import RedQueueError as LockTimeout\n",
}

#: With --str: the one argument that gives redset's default, passed when a test passes none.
STR_DEFAULT = """\
import celery_redqueue


def _with_str(base):
    class Set(base):
        def __init__(self, client, name, scorer=None, serializer=None, **kwargs):
            super().__init__(client, name, scorer, serializer or "str", **kwargs)

    Set.__name__ = base.__name__
    return Set


SortedSet = _with_str(celery_redqueue.SortedSet)
TimeSortedSet = _with_str(celery_redqueue.TimeSortedSet)
ScheduledSet = _with_str(celery_redqueue.ScheduledSet)
"""

CONFTEST = """\
import unittest

import redis

_Redis = redis.Redis


class Redis(_Redis):
    def __init__(self, host="127.0.0.1", port={port}, *args, **kwargs):
        super().__init__(host, port, *args, **kwargs)


redis.Redis = Redis
if not hasattr(unittest.TestCase, "assertEquals"):
    unittest.TestCase.assertEquals = unittest.TestCase.assertEqual
"""

#: Tests expected to fail, and why (the deliberate differences).
EXPECTED = {
    "LockExpiryTest::test_lock_timeout": "redset's private lock",
    "LockExpiryTest::test_lock_expires": "redset's private lock",
    "SortedSetTest::test_ordering": "str default (JSON here)",
    "SortedSetTest::test_peek": "str default (JSON here)",
    "SortedSetTest::test_take": "str default (JSON here)",
    "TimeSortedSetTest::test_add_at": "str default (JSON here)",
    "TimeSortedSetTest::test_peek": "str default (JSON here)",
    "ScheduledSetTest::test_schedule": "str default (JSON here)",
    "ScheduledSetTest::test_peek": "str default (JSON here)",
    # SerializerTest.setUp builds a set with serializer=object(), which redset ignores
    # (falling back to str) and these sets refuse as a configuration error.
    "SerializerTest::test_bad_serializer": "object() refused (redset falls back to str)",
    "SerializerTest::test_add_and_pop": "serializer=object() refused in setUp",
    "SerializerTest::test_cant_deserialize": "object() refused; undecodable items raise",
}


def copy_sources(source: Path, into: Path) -> None:
    """redset's tests/ and redset/serializers.py, from a clone or a bare git directory."""
    if (source / "tests").is_dir():
        shutil.copytree(source / "tests", into / "tests")
        shutil.copy(source / "redset" / "serializers.py", into / "redset" / "serializers.py")
        return
    git = ["git", f"--git-dir={source}"]
    names = subprocess.run(
        [*git, "ls-tree", "-r", "--name-only", "HEAD", "tests"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for name in [*names, "redset/serializers.py"]:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(
            subprocess.run([*git, "show", f"HEAD:{name}"], capture_output=True, check=True).stdout
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("redset", type=Path, help="a clone of percolate/redset, or its .git")
    parser.add_argument(
        "--str", action="store_true", help='pass serializer="str" where a test passes none'
    )
    args = parser.parse_args()
    expected = {
        test: why for test, why in EXPECTED.items() if not (args.str and "str default" in why)
    }
    with tempfile.TemporaryDirectory(prefix="redset-suite-") as tmp, EmbeddedRedis() as server:
        work = Path(tmp)
        (work / "redset").mkdir()
        for name, text in SHIM.items():
            (work / name).write_text(text)
        if args.str:
            (work / "redset" / "__init__.py").write_text(STR_DEFAULT)
        copy_sources(args.redset.resolve(), work)
        (work / "conftest.py").write_text(CONFTEST.format(port=server.port))
        report = work / "report.txt"
        subprocess.run(
            [
                sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                "no:celery_redqueue.testing", "-rA", "--rootdir", str(work), "tests",
            ],
            cwd=work, stdout=report.open("w"), stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
        lines = report.read_text().splitlines()

    def test_id(line: str) -> str:  # "FAILED tests/test_sets.py::Class::test - why"
        return "::".join(line.split(" ")[1].split("::")[1:])

    passed = sorted(test_id(line) for line in lines if line.startswith("PASSED"))
    failed = sorted(test_id(line) for line in lines if line.startswith(("FAILED", "ERROR")))
    unexpected = [name for name in failed if name not in expected]
    print(f"redset's suite through the shim: {len(passed)} passed, {len(failed)} failed")
    for name in failed:
        print(f"  failed {name}: {expected.get(name, 'UNEXPECTED')}")
    if unexpected:
        print("\n".join(lines[-60:]))
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())

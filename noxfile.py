"""The fast tests on every supported Python, and on the oldest and newest supported releases of
Celery, kombu and redis-py (the oldest with a few integration tests too): ``nox`` (CI's
sessions) or ``nox -s fast-3.12``, ``nox -s oldest``.

``.ci/run`` runs the whole suite on Python 3.11 and these sessions beside it, so every Python
the classifiers list runs the fast tests. Interpreters are found on PATH or in pyenv's versions
(``~/.pyenv/versions/3.12.*``); a session whose interpreter is missing is skipped, saying so.
Python 3.14 is Debian unstable's, run in a chroot by ``.ci/python3.14`` (root only; see there
why): ``nox -s fast-3.14``.
"""

from __future__ import annotations

import glob
import os

import nox

#: What "the fast tests" are: no Redis, structures against a real Redis, one real Celery worker.
#: On four pytest-xdist workers (a Redis server each): half a minute rather than a minute.
FAST_TESTS = [
    "-n",
    "4",
    "tests/pure",
    "tests/unit",
    "tests/project/test_with_pytest_celery.py",
]

#: The oldest releases the package supports (setup.cfg's floors), tested together on the oldest
#: Python.
OLDEST = ["celery==5.3.6", "kombu==5.3.7", "redis==6.4.0"]
#: What the oldest session runs besides the fast tests: real workers retrying calls, and result
#: stores meeting connection errors, where the oldest releases behave differently (a task's
#: request under its own ``__call__``, a second in-process worker's ETA messages, which errors
#: Celery's Redis backend calls safe to retry) and which the fast tests never reach. About 30 s
#: more.
OLDEST_EXTRA = [
    "tests/integration/test_lease_tasks.py",
    "tests/integration/test_retry_contract.py",
    "tests/faults/test_result_store.py",
]
#: The newest releases (``pip index versions``, December 2026), tested together on the newest
#: Python pyenv has. The other sessions take whatever pip picks, newer ones included.
NEWEST = ["celery==5.7.0", "kombu==5.7.0", "redis==8.1.0"]

#: The Pythons the host's interpreters (pyenv's) serve; 3.11 runs the whole suite in .ci/run.
PYTHONS = ["3.10", "3.12", "3.13"]

#: CI's sessions: 3.13 is "newest", so fast-3.13 is left to contributors.
nox.options.sessions = ["fast-3.10", "fast-3.12", "newest", "fast-3.14", "oldest"]
nox.options.error_on_missing_interpreters = False  # skipped with a message instead
nox.options.reuse_venv = "no"


def _put_pyenv_on_path() -> None:
    """pyenv's shims only run the versions pyenv was told to; its versions' own bin folders run
    theirs, so nox can find ``python3.10`` and the rest by name."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin")), reverse=True)
    os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_put_pyenv_on_path()


#: Prints the versions a session tests (the first line of its output after the install).
VERSIONS = (
    "import sys, celery, kombu, redis; print('python', sys.version.split()[0], "
    "'celery', celery.__version__, 'kombu', kombu.__version__, 'redis-py', redis.__version__)"
)


def _versions(session: nox.Session) -> None:
    session.run("python", "-c", VERSIONS)


@nox.session(name="fast", python=PYTHONS)
def fast(session: nox.Session) -> None:
    """The fast tests on one Python, with the newest Celery and redis-py pip finds."""
    session.install("-e", ".[test]")
    _versions(session)
    session.run("python", "-m", "pytest", "-q", *FAST_TESTS, *session.posargs)


@nox.session(python="3.10")
def oldest(session: nox.Session) -> None:
    """The fast tests, and the retrying ones (OLDEST_EXTRA), with the oldest supported Celery,
    kombu and redis-py on the oldest Python."""
    session.install("-e", ".[test]", *OLDEST)
    _versions(session)
    session.run("python", "-m", "pytest", "-q", *FAST_TESTS, *OLDEST_EXTRA, *session.posargs)


@nox.session(python="3.13")
def newest(session: nox.Session) -> None:
    """The fast tests with the newest Celery, kombu and redis-py on the newest host Python."""
    session.install("-e", ".[test]", *NEWEST)
    _versions(session)
    session.run("python", "-m", "pytest", "-q", *FAST_TESTS, *session.posargs)


@nox.session(name="fast-3.14", python=False)
def fast_314(session: nox.Session) -> None:
    """The fast tests on Python 3.14 (Debian unstable's, in a chroot: ``.ci/python3.14``)."""
    if os.geteuid() != 0:
        session.skip(".ci/python3.14 needs root (debootstrap, chroot)")
    script = (
        'python3.14 -m venv .venv && .venv/bin/pip install -q -e ".[test]" && '
        '.venv/bin/python -c "$0" && exec .venv/bin/python -m pytest -q "$@"'
    )
    session.run(
        ".ci/python3.14", "sh", "-c", script, VERSIONS, *FAST_TESTS, *session.posargs,
        external=True,
    )  # fmt: skip

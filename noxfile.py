"""The fast tests on every supported Python, and on the oldest and newest supported releases of
Celery and redis-py: ``nox`` (all sessions) or ``nox -s fast-3.12``, ``nox -s oldest``.

``.ci/run`` runs the whole suite on Python 3.11 and these sessions beside it. Interpreters are
found on PATH or in pyenv's versions (``~/.pyenv/versions/3.12.*``); a session whose interpreter
is missing is skipped, saying so.
"""

from __future__ import annotations

import glob
import os

import nox

#: What "the fast tests" are: no Redis, structures against a real Redis, one real Celery worker.
FAST_TESTS = [
    "tests/pure",
    "tests/unit",
    "tests/project/test_with_pytest_celery.py",
]

#: The oldest releases the package supports (setup.cfg's floors), tested together on the oldest
#: Python. The newest are what pip picks in the other sessions.
OLDEST = ["celery==5.3.6", "kombu==5.3.7", "redis==6.1.0"]

PYTHONS = ["3.10", "3.12", "3.13"]

nox.options.sessions = [*(f"fast-{v}" for v in PYTHONS), "oldest"]
nox.options.error_on_missing_interpreters = False  # skipped with a message instead
nox.options.reuse_venv = "no"


def _put_pyenv_on_path() -> None:
    """pyenv's shims only run the versions pyenv was told to; its versions' own bin folders run
    theirs, so nox can find ``python3.10`` and the rest by name."""
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin")), reverse=True)
    os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_put_pyenv_on_path()


def _versions(session: nox.Session) -> None:
    session.run(
        "python",
        "-c",
        "import sys, celery, kombu, redis; print('python', sys.version.split()[0], "
        "'celery', celery.__version__, 'kombu', kombu.__version__, 'redis-py', redis.__version__)",
    )


@nox.session(name="fast", python=PYTHONS)
def fast(session: nox.Session) -> None:
    """The fast tests on one Python, with the newest Celery and redis-py pip finds."""
    session.install("-e", ".[test]")
    _versions(session)
    session.run("python", "-m", "pytest", "-q", *FAST_TESTS, *session.posargs)


@nox.session(python="3.10")
def oldest(session: nox.Session) -> None:
    """The fast tests with the oldest supported Celery, kombu and redis-py on the oldest Python."""
    session.install("-e", ".[test]", *OLDEST)
    _versions(session)
    session.run("python", "-m", "pytest", "-q", *FAST_TESTS, *session.posargs)

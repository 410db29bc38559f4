"""The plugin's hooks: a killed run cleans up, and pytest-xdist can carry every report.

* SIGTERM (a CI timeout, ``kill``) ends the run as Ctrl-C does, so fixtures are torn down: the
  session's Redis server stops, ``celery worker`` subprocesses get stopped. A second SIGTERM
  kills at once. Servers started by `celery_redqueue.embedded` die with the process anyway (on
  Linux), even after SIGKILL.
* Under pytest-xdist each worker ends when the controller does, and a worker's reports reach the
  controller even when captured output holds bytes that are not UTF-8 (a log line quoting a
  pickled payload, say): xdist cannot send such text, and the worker would crash instead.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Generator
from types import FrameType
from typing import TYPE_CHECKING

import pytest

from ..embedded import end_with_parent

if TYPE_CHECKING:
    from pluggy import Result

#: The SIGTERM handler before the plugin's (a function, SIG_DFL/SIG_IGN, or None: not from Python).
_previous: Callable[[int, FrameType | None], object] | int | None = None


def _terminated(signum: int, frame: FrameType | None) -> None:
    # Once only: a teardown that hangs must not make the process unkillable by SIGTERM.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")


def pytest_configure(config: pytest.Config) -> None:
    global _previous
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current in (signal.SIG_DFL, None):
            _previous = signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread: leave signals alone
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # An xdist worker ends (with SIGTERM: its fixtures torn down) when the controller does.
        end_with_parent(signal.SIGTERM)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _previous
    if _previous is not None and signal.getsignal(signal.SIGTERM) is _terminated:
        signal.signal(signal.SIGTERM, _previous)
    _previous = None


def _sendable(text: str) -> str:
    if isinstance(text, str):
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, _sendable(text)) for title, text in report.sections]
    if isinstance(report.longrepr, str):
        report.longrepr = _sendable(report.longrepr)

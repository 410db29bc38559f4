"""Small helpers shared by the tests (no fixtures here)."""

import time


def wait_for(predicate, timeout=30.0, interval=0.05, message="condition"):
    """Poll ``predicate`` until it is truthy; generous timeouts, never a timing assert."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)

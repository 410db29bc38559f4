"""What the package's worker bootsteps share (the continuous consumer, the watchdog, the drains'
yield): a step that starts nothing Celery builds (``create`` returns None), stops the same on a
warm or a cold shutdown, and is included only when its ``enabled`` says so."""

from __future__ import annotations

from typing import Any

from celery import bootsteps


class RedQueueStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Base of the package's worker steps: subclasses set ``enabled`` in ``__init__`` (True:
    decided in ``start``) and implement ``start`` and ``stop``."""

    enabled = True

    def include_if(self, parent: Any) -> bool:
        return self.enabled

    def create(self, parent: Any) -> Any:
        return None

    def stop(self, parent: Any) -> None:
        raise NotImplementedError

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)

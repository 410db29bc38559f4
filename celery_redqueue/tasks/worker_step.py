"""What the package's worker bootsteps share (the continuous consumer, the watchdog, the drains'
yield): a step that starts nothing Celery builds (``create`` returns None), stops the same on a
warm or a cold shutdown, and is included only when its ``enabled`` says so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from celery import bootsteps

if TYPE_CHECKING:
    from celery.worker import WorkController


class RedQueueStep(bootsteps.StartStopStep):
    """Base of the package's worker steps: subclasses set ``enabled`` in ``__init__`` (True:
    decided in ``start``) and implement ``start`` and ``stop``."""

    enabled = True

    def include_if(self, parent: WorkController) -> bool:
        return self.enabled

    def create(self, parent: WorkController) -> None:
        return None

    def stop(self, parent: WorkController) -> None:
        raise NotImplementedError

    def shutdown(self, parent: WorkController) -> None:
        self.stop(parent)

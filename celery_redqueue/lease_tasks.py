"""Deprecated location: use ``celery_redqueue.tasks.lease``."""

import warnings

from .tasks.lease import *  # noqa: F403

warnings.warn(
    "celery_redqueue.lease_tasks moved to celery_redqueue.tasks.lease",
    DeprecationWarning,
    stacklevel=2,
)

"""Deprecated location: use ``celery_redqueue.structures.sets``."""

import warnings

from .structures.sets import *  # noqa: F403

warnings.warn(
    "celery_redqueue.sets moved to celery_redqueue.structures.sets",
    DeprecationWarning,
    stacklevel=2,
)

"""Deprecated location: use ``celery_redqueue.structures.leases``."""

import warnings

from .structures.leases import *  # noqa: F403

warnings.warn(
    "celery_redqueue.leases moved to celery_redqueue.structures.leases",
    DeprecationWarning,
    stacklevel=2,
)

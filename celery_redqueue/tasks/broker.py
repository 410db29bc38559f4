"""Whether the broker can take drain jobs at all: a broker that is down is waited out (the call
is stored and the next call or beat sends the job), one that never can is a configuration error.

A bare ``pip install`` once stored every call with ``kept=True`` and a warning promising that the
next call would send the drain, while kombu's Redis transport could not even be imported
(``No module named 'packaging'``): every send failed the same way and no worker started. So the
transport is loaded when a task binds to its app (`check_transport`), and a send that fails with
anything but a connection-level error raises `BrokerConfigurationError` (`is_transient`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from ..errors import BrokerConfigurationError

if TYPE_CHECKING:
    from celery import Celery

#: What a broker that is down, restarting, unreachable or full raises through Celery's send:
#: kombu's wrapper of the transport's connection and channel errors, socket and timeout errors
#: (``OSError``), and the broker Redis's own replies (loading, read-only, out of memory).
TRANSIENT = (OperationalError, OSError, RedisError)

#: The broker URL each app's transport was loaded for (an app can be reconfigured before use).
_checked: weakref.WeakKeyDictionary[Celery, str] = weakref.WeakKeyDictionary()


def is_transient(exc: BaseException) -> bool:
    """A send failure that a later send can get past (the broker is down, not misconfigured)."""
    return isinstance(exc, TRANSIENT)


def check_transport(app: Celery) -> None:
    """Load the app's broker transport, as a send would, without connecting: raise
    `BrokerConfigurationError` (the cause chained) if it cannot be."""
    url = str(app.conf.broker_url or "")
    if _checked.get(app) == url:
        return
    try:
        with app.connection_for_write() as connection:
            connection.transport  # noqa: B018 (imports the transport module and builds it)
    except Exception as exc:
        raise refused(app, exc) from exc
    _checked[app] = url


def refused(app: Celery, exc: BaseException, stored: str = "") -> BrokerConfigurationError:
    """The error for a broker that can never take a job, naming the likely fix."""
    fix = (
        f"install what it names (pip install {exc.name!r})"
        if isinstance(exc, ImportError) and exc.name
        else "check the broker settings (broker_url, broker_transport_options, serializer)"
    )
    return BrokerConfigurationError(
        f"{app.main or 'the Celery app'}: the broker cannot take drain jobs: "
        f"{type(exc).__name__}: {exc}{stored}; {fix}"
    )

"""The redqueue dashboard as a WSGI application, to mount in your own web project.

``celery -A proj redqueue dashboard`` runs it on its own; mount it instead to put it behind
your project's login (the token still guards actions)::

    # Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    from celery_redqueue.web import dashboard_app
    flask_app.wsgi_app = DispatcherMiddleware(
        flask_app.wsgi_app, {"/redqueue": dashboard_app(celery_app, token=os.environ["T"])}
    )

    # Django (wsgi.py): send /redqueue/ to the dashboard, the rest to Django
    from celery_redqueue.web import dashboard_app, mount
    application = mount(get_wsgi_application(), "/redqueue", dashboard_app(celery_app))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .ops.reading import Operations
from .ops.web import Dashboard, make_dashboard_server

__all__ = ["Dashboard", "Operations", "dashboard_app", "make_dashboard_server", "mount"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def dashboard_app(
    celery_app: Any,
    token: str | None = None,
    refresh: float = 2.0,
    allowed_hosts: Iterable[str] | None = None,
) -> Dashboard:
    """The dashboard of a Celery app's structures as a WSGI callable.

    Args:
        celery_app: the app; its ``redqueue_*`` settings say where the structures are.
        token: unlocks actions; defaults to ``redqueue_dashboard_token`` (None: read-only).
        refresh: seconds between the page's refreshes.
        allowed_hosts: host names accepted in the ``Host`` header (None: any).
    """
    if token is None:
        token = celery_app.conf.get("redqueue_dashboard_token") or None
    return Dashboard(
        Operations.from_app(celery_app), token=token, refresh=refresh, allowed_hosts=allowed_hosts
    )


def mount(app: WSGIApp, path: str, dashboard: WSGIApp) -> WSGIApp:
    """Route requests under ``path`` to ``dashboard`` and all others to ``app``."""
    path = "/" + path.strip("/")

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        info = environ.get("PATH_INFO", "")
        if info == path or info.startswith(path + "/"):
            environ = dict(
                environ,
                SCRIPT_NAME=environ.get("SCRIPT_NAME", "") + path,
                PATH_INFO=info[len(path) :],
            )
            return dashboard(environ, start_response)
        return app(environ, start_response)

    return dispatch

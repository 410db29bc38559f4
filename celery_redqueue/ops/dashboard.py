"""The dashboard: a plain WSGI application (standard library only) and its server.

One HTML page, one script and one stylesheet, served from the package, poll two JSON
endpoints; ``/metrics`` serves Prometheus. Reading is open to whoever reaches the port; actions
are POSTs that need the configured token (``Authorization: Bearer``), the page's CSRF token
(``X-CSRF-Token``, a per-process secret only the page can read), a same-origin request and a
JSON body (which a cross-site HTML form cannot send). Every response forbids inline script and
framing. docs/operations.md explains running it and mounting it (`dashboard_app`, `mount`) in
a Flask or Django project.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections.abc import Callable, Iterable
from importlib import resources
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis
from celery import Celery

from ..errors import ConfigurationError, RedQueueError
from .metrics import render
from .reading import WORK_KINDS, Operations, View, json_default

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

logger = logging.getLogger(__name__)

#: PEP 3333's ``start_response(status, headers[, exc_info])``; it returns ``write(data)``.
StartResponse = Callable[..., Callable[[bytes], object]]

SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]
STATIC = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
#: Largest action body accepted, bytes (a page of dead-letter references fits easily).
MAX_BODY = 4 * 1024 * 1024


class HTTPError(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def _asset(name: str) -> bytes:
    return resources.files("celery_redqueue.ops").joinpath("static").joinpath(name).read_bytes()


def _host(environ: WSGIEnvironment) -> str:
    """The Host header's name, without the port ("[::1]:80" gives "[::1]")."""
    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")).lower()
    return host.rsplit(":", 1)[0] if host.rsplit(":", 1)[-1].isdigit() else host


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _int(query: dict[str, list[str]], name: str, default: int, high: int) -> int:
    try:
        value = int(query.get(name, [str(default)])[0])
    except ValueError:
        raise HTTPError("400 Bad Request", f"{name} must be an integer") from None
    return min(max(value, 0), high)


def _number(body: dict[str, object], name: str, what: str) -> float | None:
    """An action's optional number (None when not given)."""
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise HTTPError("400 Bad Request", f"{name} must be {what}")
    return value


class Dashboard:
    """The dashboard as a WSGI callable; mount it under any path of a WSGI server.

    Args:
        ops: what to read and act on (see `Operations.from_app()`).
        token: the secret that unlocks actions; None makes the dashboard read-only.
        refresh: seconds between the page's refreshes.
        allowed_hosts: host names the ``Host`` header may carry (any port); None accepts any
            (a project that mounts the dashboard checks hosts itself). The command passes the
            loopback names when it binds to loopback, so a page on another site that rebinds
            its DNS name to 127.0.0.1 cannot read the dashboard.
    """

    def __init__(
        self,
        ops: Operations,
        token: str | None = None,
        refresh: float = 2.0,
        allowed_hosts: Iterable[str] | None = None,
    ) -> None:
        if token is not None and (not isinstance(token, str) or len(token) < 8):
            raise ConfigurationError("the dashboard token must be a string of 8 characters or more")
        self.ops = ops
        self.token = token
        self.refresh = refresh
        self.allowed_hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}
        self.csrf = secrets.token_urlsafe(32)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "") or ""
        try:
            if self.allowed_hosts is not None and _host(environ) not in self.allowed_hosts:
                raise HTTPError("400 Bad Request", "unexpected Host header")
            if path == "":  # mounted at /x and asked for /x: relative links need the slash
                location = environ.get("SCRIPT_NAME", "") + "/"
                start_response("302 Found", [("Location", location), *SECURITY_HEADERS])
                return [b""]
            if method == "POST" and path == "/api/action":
                return self._json(start_response, self._action(environ))
            if method not in ("GET", "HEAD") or path == "/api/action":
                raise HTTPError("405 Method Not Allowed", "method not allowed")
            if path == "/":
                return self._page(start_response)
            if path.startswith("/static/") and path[8:] in STATIC:
                return self._send(start_response, "200 OK", STATIC[path[8:]], _asset(path[8:]))
            query = parse_qs(environ.get("QUERY_STRING", ""))
            if path == "/api/overview":
                return self._json(start_response, self.ops.overview())
            if path == "/api/structure":
                return self._json(start_response, self._detail(query))
            if path == "/metrics":
                body, content_type = render(self.ops)
                return self._send(start_response, "200 OK", content_type, body)
            raise HTTPError("404 Not Found", "not found")
        except HTTPError as exc:
            return self._json(start_response, {"error": str(exc)}, exc.status)
        except ConfigurationError as exc:
            return self._json(start_response, {"error": str(exc)}, "400 Bad Request")
        except (RedQueueError, redis.exceptions.RedisError) as exc:
            logger.warning("redqueue dashboard: %s", exc)
            return self._json(start_response, {"error": str(exc)}, "503 Service Unavailable")

    # Responses

    def _send(
        self, start_response: StartResponse, status: str, content_type: str, body: bytes
    ) -> list[bytes]:
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        start_response(status, headers + SECURITY_HEADERS)
        return [body]

    def _json(
        self, start_response: StartResponse, data: object, status: str = "200 OK"
    ) -> list[bytes]:
        body = json.dumps(data, default=json_default).encode()
        return self._send(start_response, status, "application/json", body)

    def _page(self, start_response: StartResponse) -> list[bytes]:
        page = _asset("index.html").decode()
        page = page.replace("{{csrf}}", self.csrf)
        page = page.replace("{{actions}}", "on" if self.token else "off")
        page = page.replace("{{refresh}}", str(int(self.refresh * 1000)))
        return self._send(start_response, "200 OK", "text/html; charset=utf-8", page.encode())

    # Reading

    def _detail(self, query: dict[str, list[str]]) -> View:
        target = self.ops.find(query.get("id", [""])[0])
        detail = self.ops.view(target)
        if target.kind == "lease":
            detail["resources"] = self.ops.resources(target)
            return detail
        if target.kind == "unique":
            return detail  # its held keys are in the view
        start = _int(query, "dead_start", 0, 10**9)
        count = _int(query, "dead_count", 50, 500)
        detail["dead_letters"] = self.ops.dead_letters(target, start, count)
        detail["can_drain"] = self.token is not None and self.ops.drain_task(target) is not None
        if target.kind in ("pool", "bucket") and target.structure.settings().get("debounce"):
            detail["debounced"] = self.ops.debounced_keys(target)
        if target.kind == "bucket":
            top = _int(query, "top", 20, 200)
            detail["keys"] = self.ops.keys(target, top, query.get("q", [""])[0][:200])
            detail["noisy"] = self.ops.noisy(target, 10)
        return detail

    # Acting

    def _check(self, environ: WSGIEnvironment) -> None:
        """Refuse an action unless it comes from this page, with the token (403 otherwise)."""
        if self.token is None:
            raise HTTPError("403 Forbidden", "read-only: start the dashboard with a token")
        site = environ.get("HTTP_SEC_FETCH_SITE")
        if site is not None and site not in ("same-origin", "none"):
            raise HTTPError("403 Forbidden", "cross-site request refused")
        origin = environ.get("HTTP_ORIGIN")
        # Host and port must match; the scheme is not compared, since behind a proxy that ends
        # TLS the application sees http while the browser's Origin says https.
        if origin is not None and origin.partition("://")[2] != environ.get("HTTP_HOST", ""):
            raise HTTPError("403 Forbidden", "cross-origin request refused")
        csrf = environ.get("HTTP_X_CSRF_TOKEN", "")
        if not hmac.compare_digest(csrf.encode(), self.csrf.encode()):
            raise HTTPError("403 Forbidden", "missing or stale CSRF token: reload the page")
        auth = environ.get("HTTP_AUTHORIZATION", "")
        given = auth[7:] if auth.startswith("Bearer ") else ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise HTTPError("403 Forbidden", "a valid token is needed for actions")
        if environ.get("CONTENT_TYPE", "").split(";")[0].strip() != "application/json":
            raise HTTPError("415 Unsupported Media Type", "actions take a JSON body")

    def _action(self, environ: WSGIEnvironment) -> dict[str, object]:
        self._check(environ)
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            raise HTTPError("400 Bad Request", "a JSON body is needed")
        try:
            body = json.loads(environ["wsgi.input"].read(length))
        except ValueError:
            raise HTTPError("400 Bad Request", "the body is not JSON") from None
        if not isinstance(body, dict):
            raise HTTPError("400 Bad Request", "the body must be a JSON object")
        target = self.ops.find(str(body.get("id", "")))
        action = body.get("action")
        refs = body.get("refs")
        if refs is not None and (
            not isinstance(refs, list) or not all(isinstance(r, str) for r in refs)
        ):
            raise HTTPError("400 Bad Request", "refs must be a list of strings")
        if action in ("requeue", "purge") and target.kind in WORK_KINDS:
            if refs is None and body.get("all") is not True:
                raise HTTPError("400 Bad Request", "name the letters (refs) or say all: true")
            act = self.ops.requeue if action == "requeue" else self.ops.purge
            message = act(target, refs)
        elif action == "drain" and target.kind in WORK_KINDS:
            message = self.ops.send_drain(target)
        elif action == "set_rate" and target.kind == "bucket":
            burst = _number(body, "burst", "a number")
            message = self.ops.set_rate(
                target, str(body.get("key", "")), str(body.get("rate")), burst
            )
        elif action in ("pause", "resume") and target.kind == "bucket":
            key, seconds = str(body.get("key", "")), _number(body, "seconds", "a number or null")
            if action == "pause":
                message = self.ops.pause(target, key, seconds)
            else:
                message = self.ops.resume(target, key)
        else:
            raise HTTPError("400 Bad Request", f"no action {action!r} for {target.id}")
        logger.info("redqueue dashboard: %s on %s: %s", action, target.id, message)
        return {"ok": True, "message": message}


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        logger.debug("redqueue dashboard: " + format, *args)


def make_dashboard_server(app: Dashboard, host: str = "127.0.0.1", port: int = 5566) -> WSGIServer:
    """A threaded HTTP server for the dashboard (``serve_forever()`` it; port 0 picks one)."""
    return make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)


WSGIApp = Callable[["WSGIEnvironment", StartResponse], Iterable[bytes]]


def dashboard_app(
    celery_app: Celery,
    token: str | None = None,
    refresh: float = 2.0,
    allowed_hosts: Iterable[str] | None = None,
) -> Dashboard:
    """The dashboard of a Celery app's structures (its ``redqueue_*`` settings) as a WSGI
    callable; ``token`` defaults to ``redqueue_dashboard_token``, the rest is `Dashboard`'s."""
    if token is None:
        token = celery_app.conf.get("redqueue_dashboard_token") or None
    return Dashboard(
        Operations.from_app(celery_app), token=token, refresh=refresh, allowed_hosts=allowed_hosts
    )


def mount(app: WSGIApp, path: str, dashboard: WSGIApp) -> WSGIApp:
    """Route requests under ``path`` to ``dashboard`` and all others to ``app``."""
    path = "/" + path.strip("/")

    def dispatch(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
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

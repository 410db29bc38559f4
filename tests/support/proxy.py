"""A TCP proxy on loopback that loses replies on purpose: the fault a load balancer resetting a
connection, a failover or a NAT timeout causes, made repeatable.

Put it in front of a Redis server and point a client at `ReplyDroppingProxy.url`. It
forwards bytes both ways until told to drop: then, once a command containing ``marker`` (a
script's SHA, ``b"EVALSHA"``, ...) has gone through to Redis, it waits for Redis's reply (so
the command **ran**), throws the reply away and closes that client connection. The client sees
a connection error on read: a lost reply.

    with ReplyDroppingProxy(("127.0.0.1", 6379)) as proxy:
        client = redis.Redis.from_url(proxy.url)
        proxy.drop(marker=script("pool_pop").sha.encode())   # the next pop's reply
        ...

``drop(count=n)`` loses the next ``n`` matching replies; ``drop(rate=p)`` loses each matching
reply with probability ``p`` until `stop_dropping()` (the torture suite's mode).
`dropped` counts the replies lost so far. One command at a time per connection is assumed
for matching (a pipeline's replies are dropped together).
"""

from __future__ import annotations

import contextlib
import random
import select
import socket
import threading
from typing import Any


class ReplyDroppingProxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream``, losing replies on request."""

    def __init__(self, upstream: tuple[str, int], db: int = 0) -> None:
        self.upstream = upstream
        self.db = db
        self.dropped = 0
        self._lock = threading.Lock()
        self._marker = b""
        self._count = 0
        self._rate = 0.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._running = False
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{self.db}"

    def drop(self, marker: bytes = b"EVALSHA", *, count: int = 1, rate: float = 0.0) -> None:
        """Lose the next ``count`` replies to commands containing ``marker`` (with ``rate``:
        each such reply with that probability, until `stop_dropping()`)."""
        with self._lock:
            self._marker, self._count, self._rate = marker, count, rate

    def stop_dropping(self) -> None:
        with self._lock:
            self._count, self._rate = 0, 0.0

    def _doom(self, data: bytes) -> bool:
        """Whether the reply to this client chunk is to be lost."""
        with self._lock:
            if not self._marker or self._marker not in data:
                return False
            if self._rate > 0:
                return random.random() < self._rate
            if self._count > 0:
                self._count -= 1
                return True
            return False

    def start(self) -> ReplyDroppingProxy:
        self._running = True
        thread = threading.Thread(target=self._accept, name="reply-dropping-proxy", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def close(self) -> None:
        self._running = False
        # Closing a listening socket does not wake a thread blocked in accept() (Linux): shut
        # it down first, or every close waits out the join's timeout.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            _close(sock)
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> ReplyDroppingProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _accept(self) -> None:
        while self._running:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, server))
            thread = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            thread.start()
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        doomed = False
        try:
            while self._running:
                ready, _, _ = select.select([client, server], [], [], 0.2)
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    doomed = doomed or self._doom(data)
                    server.sendall(data)
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        return
                    if doomed:  # the command ran; its reply is lost with the connection
                        with self._lock:
                            self.dropped += 1
                        return
                    client.sendall(data)
        except OSError:
            return
        finally:
            for sock in (client, server):
                _close(sock)
            with self._lock:
                self._open.difference_update((client, server))


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()

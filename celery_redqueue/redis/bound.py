"""The producer's hot path: a script with its keys and leading arguments packed once, run on a
connection the calling thread keeps (:class:`BoundScript`, made by ``LuaScript.bind``).

A pooled ``.delay()`` is one round trip, so everything around that round trip shows. redis-py's
general command path (taking a connection from the pool and giving it back, its retry wrapper
and observability hooks, packing every argument again) costs more per call than the whole
script does inside Redis; ``bench/pool_bench.py``'s producer table measures both.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis

from .client import translate_error

if TYPE_CHECKING:
    from .lua import KeyOrArg, LuaScript

#: Replies that mean "ask another node" (or "not now") on Redis Cluster.
_REDIRECTED: tuple[type[Exception], ...] = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)

#: A thread keeps a connection only while fewer than this share of the pool's connection limit
#: is kept by threads: the rest stays free for every other command (redis-py 8's pools allow
#: 100 connections by default, BlockingConnectionPool 50; a limit of 1 keeps none).
HOLD_SHARE = 0.5


def _needs_command_name(pool: Any) -> bool:
    """redis-py < 6 wants a command name for ``get_connection``; later versions deprecate it."""
    parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


class _Holders:
    """The connections the threads keep from one connection pool, and how many they are."""

    def __init__(self, pool: Any) -> None:
        limit = getattr(pool, "max_connections", None) or 0
        self.limit = int(min(limit, 2**31) * HOLD_SHARE)
        self.start()

    def start(self) -> None:
        """Nothing kept yet; also what a forked child starts from (its pool is a new one to
        redis-py, and a lock copied by fork may be held by a thread that does not exist)."""
        self.pid = os.getpid()
        self.local = threading.local()
        self.lock = threading.Lock()
        self.count = 0


class _HeldConnection:
    """A connection of ``pool`` that one thread (or greenlet) keeps for its hot-path calls,
    given back to the pool when the thread ends (CPython then drops its thread-local values)."""

    __slots__ = ("busy", "conn", "holders", "pid", "pool")

    def __init__(self, pool: Any, holders: _Holders, conn: Any) -> None:
        self.pool = pool
        self.holders = holders
        self.pid = os.getpid()
        self.conn = conn
        #: A call is between sending and reading its reply on ``conn``: a call made meanwhile
        #: on the same thread (a signal handler, a finalizer run by the garbage collector)
        #: takes a connection of its own, or each would read the other's reply.
        self.busy = False

    def __del__(self) -> None:
        if self.pid == os.getpid() == self.holders.pid:  # not a parent's, dropped in a child
            with self.holders.lock:
                self.holders.count -= 1
        with contextlib.suppress(Exception):  # at interpreter exit the pool may be gone
            self.pool.release(self.conn)  # a pool reset by a fork ignores its parent's


#: Per connection pool, what its threads keep.
_holders: weakref.WeakKeyDictionary[Any, _Holders] = weakref.WeakKeyDictionary()
_holders_lock = threading.Lock()


def _holders_of(pool: Any) -> _Holders:
    with _holders_lock:
        holders = _holders.get(pool)
        if holders is None:
            holders = _holders[pool] = _Holders(pool)
        return holders


class BoundScript:
    """A script whose keys and leading arguments are fixed, packed into protocol bytes once.

    A call packs only its own arguments and runs EVALSHA on a connection the calling thread
    keeps from the client's pool; when threads already keep half of the pool's connection limit,
    a call takes a connection and gives it back instead. What redis-py's general path does for
    us is kept: the connection belongs to the same pool (a fork gets fresh ones, Sentinel
    rediscovers the master on reconnect), errors are translated the same way, NOSCRIPT loads the
    script, and a broken connection (a restarted Redis, a failover) is dropped and the call
    handed to the general path, which reconnects as it always did. A timeout is not retried:
    the script may have run. On Redis Cluster the call goes to the master serving the keys'
    slot (every script's keys share one hash tag), from the cluster client's slot table; a
    redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) hands the call to the cluster client, which
    follows it, and the next call binds again. A single-connection client always takes the
    general path. A call made on a thread while its kept connection waits for a reply (from a
    signal handler, a finalizer, or a greenlet when gevent patched sockets but not threads)
    takes a connection and gives it back, as when the limit is reached.
    """

    def __init__(
        self, script: LuaScript, client: Any, keys: Sequence[KeyOrArg], head: Sequence[KeyOrArg]
    ) -> None:
        self.script = script
        self.client = client
        self.keys = list(keys)
        self.head = list(head)
        self._cluster = hasattr(client, "get_node_from_key")
        self._bind()

    def _bind(self) -> None:
        """Pack the fixed part for the connection pool the calls will use: the client's own, or
        on Redis Cluster that of the master serving the keys' slot (from the client's slot
        table; rebound after a redirection). None: every call takes the general path."""
        self._stale = False
        target = self.client
        if self._cluster:
            target = None
            with contextlib.suppress(Exception):  # an uncovered slot: the general path says so
                target = self.client.get_node_from_key(self.keys[0]).redis_connection
        pool = getattr(target, "connection_pool", None)
        self._pool: Any = pool
        if pool is None or getattr(target, "connection", None) is not None:
            self._pool = None
            return
        self._holders = _holders_of(pool)
        self._name_args: tuple[str, ...] = ("EVALSHA",) if _needs_command_name(pool) else ()
        self._encode = pool.get_encoder().encode
        fixed = [b"EVALSHA", self.script.sha.encode(), b"%d" % len(self.keys)]
        fixed += [self._encode(part) for part in (*self.keys, *self.head)]
        self._fixed = len(fixed)
        self._prefix = b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in fixed)

    def __call__(self, *tail: KeyOrArg) -> Any:
        """Run the script with ``tail`` after the fixed arguments; returns its reply."""
        if self._stale:
            self._bind()
        pool = self._pool
        if pool is None:
            return self.script(self.client, self.keys, [*self.head, *tail])
        parts = [b"*%d\r\n" % (self._fixed + len(tail)), self._prefix]
        for arg in tail:
            data = arg if isinstance(arg, bytes) else self._encode(arg)
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        packed = b"".join(parts)
        try:
            held = self._held()
            if held is not None and not held.busy:
                conn = held.conn
            else:
                held = None
                conn = pool.get_connection(*self._name_args)
        except redis.exceptions.RedisError:
            # No connection to be had (Redis down): the general path tries as it always did
            # and raises the translated error.
            return self.script(self.client, self.keys, [*self.head, *tail])
        if held is not None:
            held.busy = True
            try:
                return self._send(conn, packed, tail)
            finally:
                held.busy = False
        try:
            return self._send(conn, packed, tail)
        finally:
            pool.release(conn)

    def _held(self) -> _HeldConnection | None:
        """This thread's kept connection, taken now if the pool can spare it."""
        pool, holders = self._pool, self._holders
        held: _HeldConnection | None = getattr(holders.local, "held", None)
        if held is not None and held.pid == os.getpid():
            return held
        if holders.pid != os.getpid():
            holders.start()
        with holders.lock:
            if holders.count >= holders.limit:
                return None
            holders.count += 1
        try:
            conn = pool.get_connection(*self._name_args)
        except BaseException:
            with holders.lock:
                holders.count -= 1
            raise
        held = holders.local.held = _HeldConnection(pool, holders, conn)
        return held

    def _send(self, conn: Any, packed: bytes, tail: tuple[KeyOrArg, ...]) -> Any:
        try:
            conn.send_packed_command([packed])
            return conn.read_response()
        except redis.exceptions.NoScriptError:
            pass  # a restarted or new server: the general path loads it
        except _REDIRECTED:
            # The slot moved, or the cluster is changing: the general path follows the
            # redirection and updates the slot table, and the next call binds again.
            self._stale = self._cluster
        except redis.exceptions.ResponseError as exc:
            raise translate_error(exc, f"running {self.script.name}") from exc
        except redis.exceptions.ConnectionError:
            conn.disconnect()  # stale (Redis restarted, a failover): reconnect as redis-py does
            self._stale = self._cluster  # a cluster may have a new master for the slot
        except BaseException as exc:
            conn.disconnect()  # a timeout or an interrupted read: the reply may still come
            if isinstance(exc, redis.exceptions.RedisError):
                raise translate_error(exc, f"running {self.script.name}") from exc
            raise
        return self.script(self.client, self.keys, [*self.head, *tail])

"""The one way a script reaches Redis: `run_script()`, sent once, never retried by redis-py.

redis-py (6+) re-sends a command after a ``ConnectionError`` on read, and a user's
``redqueue_redis_options`` may configure any ``Retry``. For a script that is a second run after
a lost reply: a store kept twice, a pop that overwrote its own batch. So scripts never go
through redis-py's command path: this module takes a connection, sends EVALSHA once and reads
the reply, and decides what a lost reply means from the script's header (``-- Lost reply:``,
see `lua`): a script that is safe to run twice is sent again on a fresh connection; any
other raises [`ReplyLostError`][celery_redqueue.ReplyLostError] ("may have been applied").

It is also the producer's hot path: a thread keeps one connection of the client's pool, and
the fixed part of a call (EVALSHA, SHA, keys) is packed once; docs/performance.md says what
that buys and what of redis-py's path is kept (the pool, error translation, NOSCRIPT loading).
A kept connection the server closed while idle is reconnected before sending. On Redis Cluster
the call goes to the master serving the keys' slot; MOVED and ASK are followed here, TRYAGAIN
and CLUSTERDOWN waited out (none of them ran the script).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import select
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis

from ..errors import ReplyLostError
from .blocking import is_cluster, slot_master
from .client import translate_error

if TYPE_CHECKING:
    from .lua import KeyOrArg, LuaScript

#: A thread keeps a connection only while fewer than this share of the pool's connection limit
#: is kept by threads: the rest stays free for every other command (redis-py 8's pools allow
#: 100 connections by default, BlockingConnectionPool 50; a limit of 1 keeps none).
HOLD_SHARE = 0.5

#: Sends of one call: redirections, NOSCRIPT, waits of a changing cluster, and re-sends of a
#: script that is safe to run twice after a lost reply (a CLIENT KILL storm may drop several).
MAX_SENDS = 5

#: Seconds to wait before sending again when a cluster answers TRYAGAIN or CLUSTERDOWN.
CLUSTER_WAIT = 0.1


class _Lost(Exception):
    """A reply did not arrive after the script was sent (it may have run)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Again(Exception):
    """Nothing ran; send again (after a redirection, a NOSCRIPT load, a cluster wait)."""


def _needs_command_name(pool: Any) -> bool:
    """redis-py < 6 wants a command name for ``get_connection``; later versions deprecate it."""
    parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


class _Holders:
    """The connections the threads keep from one connection pool, and how many they are."""

    def __init__(self, pool: Any) -> None:
        limit = getattr(pool, "max_connections", None) or 0
        self.limit = int(min(limit, 2**31) * HOLD_SHARE)
        self.name_args: tuple[str, ...] = ("EVALSHA",) if _needs_command_name(pool) else ()
        self.start()

    def start(self) -> None:
        """Nothing kept yet; also what a forked child starts from (its pool is a new one to
        redis-py, and a lock copied by fork may be held by a thread that does not exist)."""
        self.pid = os.getpid()
        self.local = threading.local()
        self.lock = threading.Lock()
        self.count = 0


class _HeldConnection:
    """A connection of ``pool`` that one thread (or greenlet) keeps for its script calls,
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
    holders = _holders.get(pool)
    if holders is None:
        with _holders_lock:
            holders = _holders.get(pool)
            if holders is None:
                holders = _holders[pool] = _Holders(pool)
    return holders


def _held(pool: Any, holders: _Holders) -> _HeldConnection | None:
    """This thread's kept connection, taken now if the pool can spare it."""
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
        conn = pool.get_connection(*holders.name_args)
    except BaseException:
        with holders.lock:
            holders.count -= 1
        raise
    held = holders.local.held = _HeldConnection(pool, holders, conn)
    return held


def _closed_by_peer(conn: Any) -> bool:
    """True when a kept connection cannot take a command: the server closed it while it was
    idle (or left bytes on it). One non-blocking peek; sending on such a connection would look
    like a lost reply."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return False  # not connected: sending connects first
    try:
        # Readable while idle means EOF (or stray bytes): either way not ready for a command.
        # (A recv with MSG_DONTWAIT would still wait out the socket's timeout in Python.)
        return bool(select.select([sock], (), (), 0)[0])
    except (OSError, ValueError):  # ValueError: a descriptor beyond select's limit
        try:
            return bool(conn.can_read())
        except Exception:
            return True


#: (SHA, keys, encoding) -> (parts, packed prefix). Emptied when it grows past
#: `PREFIX_CACHE`: calls with a key of their own (a bucket poll's, a lease token's) would
#: otherwise grow it without end; the hot key lists are packed again on their next call.
_prefixes: dict[tuple[Any, ...], tuple[int, bytes]] = {}
PREFIX_CACHE = 2048


def _pack(
    script: LuaScript, keys: Sequence[KeyOrArg], args: Sequence[KeyOrArg], encoder: Any
) -> bytes:
    """The EVALSHA command, its fixed part (EVALSHA, SHA, key count, keys) packed once."""
    enc = encoder.encode
    cached = (script.sha, tuple(keys), encoder.encoding)
    fixed = _prefixes.get(cached)
    if fixed is None:
        parts = [b"EVALSHA", script.sha.encode(), b"%d" % len(keys)] + [enc(k) for k in keys]
        if len(_prefixes) >= PREFIX_CACHE:
            _prefixes.clear()
        fixed = _prefixes[cached] = (
            len(parts),
            b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts),
        )
    out = [b"*%d\r\n" % (fixed[0] + len(args)), fixed[1]]
    for arg in args:
        data = arg if isinstance(arg, bytes) else enc(arg)
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def run_script(
    client: Any, script: LuaScript, keys: Sequence[KeyOrArg], args: Sequence[KeyOrArg]
) -> Any:
    """Run ``script`` once on ``client`` (a Redis, Sentinel master or RedisCluster client).

    A lost reply (the connection broke after the script was sent) re-sends a script whose
    header says it is safe to run twice, on a fresh connection, and raises
    [`ReplyLostError`][celery_redqueue.ReplyLostError] for any other; a timeout raises for any
    script. Every redis-py error comes back translated (`client.translate_error()`).
    """
    action = f"running {script.name}"
    asking: Any = None
    for _ in range(MAX_SENDS):
        try:
            target = asking or _node_for(client, keys)
            return _send_once(target, script, keys, args, asking is not None)
        except _Again:
            asking = None
            continue
        except _Lost as lost:
            asking = None
            if is_cluster(client):
                with contextlib.suppress(Exception):  # a failover: find the slot's master again
                    client.nodes_manager.initialize()
            if not script.resend or isinstance(lost.cause, redis.exceptions.TimeoutError):
                raise _lost_error(script, lost.cause) from lost.cause
        except redis.exceptions.MovedError as exc:  # before AskError: a subclass of it
            asking = None
            _follow_moved(client.nodes_manager, exc)
        except redis.exceptions.AskError as exc:
            asking = client.nodes_manager.get_node(host=exc.host, port=exc.port)
            if asking is None:
                raise translate_error(exc, action) from exc
            asking = asking.redis_connection
        except (redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError) as exc:
            asking = None
            if not is_cluster(client):
                raise translate_error(exc, action) from exc
            time.sleep(CLUSTER_WAIT)
        except redis.exceptions.RedisError as exc:
            raise translate_error(exc, action) from exc
    raise ReplyLostError(
        f"{action}: no reply after {MAX_SENDS} sends (connections kept breaking); "
        "it is safe to run again"
    )


def _lost_error(script: LuaScript, cause: Exception) -> ReplyLostError:
    how = (
        "Redis did not answer in time (stalled or overloaded)"
        if isinstance(cause, redis.exceptions.TimeoutError)
        else "the connection broke before the reply arrived"
    )
    again = "it is safe to run again" if script.resend else "it was not sent again"
    return ReplyLostError(
        f"running {script.name}: {how}, so it may have been applied ({again}): {cause}"
    )


def _follow_moved(manager: Any, exc: redis.exceptions.MovedError) -> None:
    """Point the slot at its new master in the cluster client's table (redis-py 7.4+ patches
    it at once with ``move_slot``; earlier versions on the next lookup)."""
    if hasattr(manager, "move_slot"):
        manager.move_slot(exc)
    else:
        manager.update_moved_exception(exc)
        # Before 7.4 only get_node_from_slot applies the pending MOVED; get_node_from_key, which
        # _node_for uses, reads the table as it is, so every resend went to the old master.
        manager.get_node_from_slot(exc.slot_id)


def _node_for(client: Any, keys: Sequence[KeyOrArg]) -> Any:
    """The client to send to: ``client`` itself, or the master serving the keys' slot."""
    if not is_cluster(client):
        return client
    if not keys:
        return client.get_random_node().redis_connection
    target = slot_master(client, keys[0])
    if target is None:
        raise redis.exceptions.ClusterDownError(f"no node serves the slot of {keys[0]!r}")
    return target


def _send_once(
    target: Any, script: LuaScript, keys: Sequence[KeyOrArg], args: Sequence[KeyOrArg], ask: bool
) -> Any:
    """Send one EVALSHA on a connection of ``target`` and read its reply; raises _Lost when the
    reply did not come, _Again when nothing ran and the caller should send again."""
    pool = target.connection_pool
    single = getattr(target, "connection", None)
    if single is not None:  # a single-connection client: its lock, its connection
        with getattr(target, "single_connection_lock", contextlib.nullcontext()):
            return _exchange(single, script, keys, args, ask, kept=True)
    holders = _holders_of(pool)
    try:
        held = _held(pool, holders)
    except redis.exceptions.RedisError:
        held = None
    if held is not None and not held.busy:
        held.busy = True
        try:
            return _exchange(held.conn, script, keys, args, ask, kept=True)
        finally:
            held.busy = False
    conn = pool.get_connection(*holders.name_args)
    try:
        return _exchange(conn, script, keys, args, ask, kept=False)
    finally:
        pool.release(conn)


def _exchange(
    conn: Any,
    script: LuaScript,
    keys: Sequence[KeyOrArg],
    args: Sequence[KeyOrArg],
    ask: bool,
    *,
    kept: bool,
) -> Any:
    if kept and _closed_by_peer(conn):
        conn.disconnect()
    if getattr(conn, "_sock", True) is None:
        # Reconnect through connect(), not the send's own reconnect: a Sentinel connection
        # asks the sentinels for the master there (the send would dial the old address).
        conn.connect()
    packed = _pack(script, keys, args, conn.encoder)
    if ask:
        packed = b"*1\r\n$6\r\nASKING\r\n" + packed
    was_connected = getattr(conn, "_sock", None) is not None
    try:
        conn.send_packed_command([packed])
    except redis.exceptions.ConnectionError:
        # Nothing ran (Redis runs no incomplete command). A connection that was open broke
        # under us: send again, which reconnects; one that could not connect is an outage.
        conn.disconnect()
        if was_connected:
            raise _Again() from None
        raise
    except BaseException:
        conn.disconnect()
        raise
    try:
        if ask:
            conn.read_response()  # ASKING's OK
        return conn.read_response()
    except redis.exceptions.NoScriptError:
        with contextlib.suppress(redis.exceptions.ResponseError):
            conn.send_command("SCRIPT", "LOAD", script.source)
            conn.read_response()
        raise _Again() from None
    except (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.InvalidResponse,  # the stream broke mid-reply
    ) as exc:
        conn.disconnect()
        raise _Lost(exc) from exc
    except redis.exceptions.ResponseError:
        raise  # an error reply: the connection is in step
    except BaseException:
        conn.disconnect()  # an interrupted read: the reply may still come on this connection
        raise

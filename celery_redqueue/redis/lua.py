"""Lua scripts, one file per atomic operation, loaded once and called by SHA.

Every script in ``lua/`` follows one contract:

* **Header**: what it does, then every ``KEYS[i]`` and ``ARGV[i]`` by name (the keys and
  settings every script of a structure receives are named once, in ``<kind>_common.lua``, and
  a script names the range it receives), then a ``Reply:`` line; ``Bounded:`` says its cost.
* **Arguments** are read into named locals at the top (the shared ones by the common file), and
  checked before the first write: Redis does not roll back a script that fails half-way.
* **Reply**: one value when the script has one result (a count, a score, a list of ids);
  otherwise an array of fields in the order its ``Reply:`` line names them, variable-length
  parts last. "Send a drain job" is always a field of its own, ``send_drain`` (1|0; with
  ``wake_in_ms`` when a job should be sent with a countdown), never a special value of another
  field. A script that takes work out (``pool_pop``, ``bucket_dequeue``, ``stream_read``)
  replies a status first: one of :data:`EMPTY`, :data:`TAKEN`, :data:`LINGER`, :data:`AGAIN`,
  :data:`LATER` (``drain_lease.lua`` names the same values). Times with a fraction of a
  millisecond travel as ``"%.17g"`` strings (Lua's ``tostring`` keeps 14 digits).
* **Errors**: a malformed argument is an error reply ``ERR <script>: <what>``, before any write.

Helpers shared by several scripts live in included files (``--#include name``, see
:func:`script`): ``common`` (``clock``, ``flow``, ``drain_lease``, expiring ids, counters),
then per structure ``<kind>_common`` and the files it includes.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import threading
import weakref
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import redis

from .client import translate_error

KeyOrArg = str | bytes | int | float

#: The first field of a reply of a script that takes work out (pool_pop, bucket_dequeue,
#: stream_read): nothing to hand out, the drain lease released in the same step (so nothing
#: arriving afterwards is stranded); work handed out; nothing, the lease kept (linger); only
#: skipped entries and more wait (take again at once); nothing may go before the reply's wait.
EMPTY, TAKEN, LINGER, AGAIN, LATER = 0, 1, 2, 3, 4


class LuaScript:
    """One script: its SHA is computed locally; the server loads it on the first NOSCRIPT."""

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __call__(self, client: Any, keys: Sequence[KeyOrArg], args: Sequence[KeyOrArg]) -> Any:
        # try/except rather than redis_errors(): this runs on every producer call, and the
        # context manager costs more than the except clause.
        try:
            try:
                return client.evalsha(self.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                # A restarted or new server (or another cluster node) has not seen it yet.
                client.script_load(self.source)
                return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.RedisError as exc:
            raise translate_error(exc, f"running {self.name}") from exc

    def bind(self, client: Any, keys: Sequence[KeyOrArg], head: Sequence[KeyOrArg]) -> BoundScript:
        """This script with ``keys`` and the leading arguments ``head`` fixed (see
        :class:`BoundScript`)."""
        return BoundScript(self, client, keys, head)


def _needs_command_name(pool: Any) -> bool:
    """redis-py < 6 wants a command name for ``get_connection``; later versions deprecate it."""
    parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


class _HeldConnection:
    """A connection of ``pool`` that one thread (or greenlet) keeps for its hot-path calls,
    given back to the pool when the thread ends (CPython then drops its thread-local values)."""

    __slots__ = ("conn", "pid", "pool")

    def __init__(self, pool: Any, name_args: tuple[str, ...]) -> None:
        self.pool = pool
        self.pid = os.getpid()
        self.conn = pool.get_connection(*name_args)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the pool may be gone
            self.pool.release(self.conn)  # a pool reset by a fork ignores its parent's


#: Per connection pool, the thread-local holder of each thread's connection.
_held: weakref.WeakKeyDictionary[Any, threading.local] = weakref.WeakKeyDictionary()
_held_lock = threading.Lock()


def _holder(pool: Any) -> threading.local:
    with _held_lock:
        local = _held.get(pool)
        if local is None:
            local = _held[pool] = threading.local()
        return local


class BoundScript:
    """A script whose keys and leading arguments are fixed, packed into protocol bytes once:
    the producer's hot path (``pool_add_plain``), where one call is one round trip and
    everything around it shows.

    A call packs only its own arguments and runs EVALSHA on a connection the calling thread
    keeps from the client's pool. redis-py's general command path (taking a connection from the
    pool and giving it back, its retry wrapper and observability hooks, re-packing every
    argument) costs more per call than the whole script does inside Redis (measured by
    ``bench/pool_bench.py``'s producer table). What that path does for us is kept: the
    connection belongs to the same pool (a fork gets fresh ones, Sentinel rediscovers the master
    on reconnect), errors are translated the same way, NOSCRIPT loads the script, and a broken
    connection (a restarted Redis, a failover) is dropped and the call handed to the general
    path, which reconnects as it always did. A timeout is not retried: the script may have run.
    Clients without a connection pool (Redis Cluster, a single-connection client) always take
    the general path.
    """

    def __init__(
        self, script: LuaScript, client: Any, keys: Sequence[KeyOrArg], head: Sequence[KeyOrArg]
    ) -> None:
        self.script = script
        self.client = client
        self.keys = list(keys)
        self.head = list(head)
        pool = getattr(client, "connection_pool", None)
        if pool is None or getattr(client, "connection", None) is not None:
            self._pool = None
            return
        self._pool = pool
        self._local = _holder(pool)
        self._name_args: tuple[str, ...] = ("EVALSHA",) if _needs_command_name(pool) else ()
        self._encode = pool.get_encoder().encode
        fixed = [b"EVALSHA", script.sha.encode(), b"%d" % len(self.keys)]
        fixed += [self._encode(part) for part in (*self.keys, *self.head)]
        self._fixed = len(fixed)
        self._prefix = b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in fixed)

    def __call__(self, *tail: KeyOrArg) -> Any:
        if self._pool is None:
            return self.script(self.client, self.keys, [*self.head, *tail])
        parts = [b"*%d\r\n" % (self._fixed + len(tail)), self._prefix]
        for arg in tail:
            data = arg if isinstance(arg, bytes) else self._encode(arg)
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        held = getattr(self._local, "held", None)
        if held is None or held.pid != os.getpid():
            held = self._local.held = _HeldConnection(self._pool, self._name_args)
        conn = held.conn
        try:
            conn.send_packed_command([b"".join(parts)])
            return conn.read_response()
        except redis.exceptions.NoScriptError:
            pass  # a restarted or new server: the general path loads it
        except redis.exceptions.ResponseError as exc:
            raise translate_error(exc, f"running {self.script.name}") from exc
        except redis.exceptions.ConnectionError:
            conn.disconnect()  # stale (Redis restarted, a failover): reconnect as redis-py does
        except BaseException as exc:
            conn.disconnect()  # a timeout or an interrupted read: the reply may still come
            if isinstance(exc, redis.exceptions.RedisError):
                raise translate_error(exc, f"running {self.script.name}") from exc
            raise
        return self.script(self.client, self.keys, [*self.head, *tail])


INCLUDE = "--#include "


def _read(name: str) -> str:
    return (
        resources.files("celery_redqueue")
        .joinpath("lua")
        .joinpath(f"{name}.lua")
        .read_text(encoding="utf-8")
    )


def _expand(name: str, seen: set[str]) -> list[str]:
    """The lines of ``name``, with each ``--#include other`` replaced by ``other``'s lines,
    once per script however many files include it."""
    lines: list[str] = []
    for line in _read(name).splitlines():
        if line.lstrip().startswith(INCLUDE):  # indented: spliced inside a block
            included = line.lstrip()[len(INCLUDE) :].strip()
            if included not in seen:
                seen.add(included)
                lines.extend(_expand(included, seen))
        else:
            lines.append(line)
    return lines


@cache
def script(name: str) -> LuaScript:
    """Return the script ``lua/<name>.lua`` (read once per process).

    A line ``--#include other`` is replaced by ``other.lua``: Redis has no modules, and helpers
    shared by several scripts (the bucket's rate lookup) should be written once. A file
    included twice (``common`` by way of two others) is spliced in once, where first met.
    """
    return LuaScript(name, "\n".join(_expand(name, {name})) + "\n")


def read_atomic(client: Any, reads: Sequence[tuple[str, str, Sequence[KeyOrArg]]]) -> list[Any]:
    """Run read-only commands ``(name, key, extra args)`` in one atomic step; one reply each.

    A consistent snapshot like MULTI/EXEC, but Redis serves it at maxmemory too (it refuses every
    command of a MULTI then), which is when an operator needs the figures. A nil reply comes
    back as None; HGETALL as a flat list (see :func:`pairs`). All keys must share a hash tag.
    """
    keys: list[KeyOrArg] = []
    args: list[KeyOrArg] = []
    for name, key, extra in reads:
        if key not in keys:
            keys.append(key)
        args.extend((name, keys.index(key) + 1, len(extra), *extra))
    # Lua turns a nil into false, which redis-py reads as None.
    return list(script("read_atomic")(client, keys, args))


def pairs(flat: Sequence[Any]) -> dict[Any, Any]:
    """A flat ``[field, value, ...]`` reply as a dict."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}

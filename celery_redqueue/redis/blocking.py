"""Blocking reads (BLPOP) for wake signals: sent once, bounded below the socket timeout.

A blocking command holds its connection until an element arrives or its timeout ends, so the
connection's socket timeout must exceed the block time or redis-py reports a timeout that is
none. `block_pop` caps the block at `SOCKET_MARGIN` below the connection's socket
timeout, and uses a connection of its own from the client's connection pool (never a thread's
kept script connection: a script call made meanwhile on that thread would read BLPOP's reply).

It never retries (redis-py 6+ would re-send a command after a timeout, so a stalled Redis
would hold a waiter for several socket timeouts), and a failure is not an error to the
caller: what a wake signal carries is only a hint that work may be waiting, so a reply that
is lost, a Redis that restarts or stalls, all come back as "not woken" within the block time
plus one socket timeout, and the caller's next look at the structure reports the outage.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence

import redis
import redis.connection

from ..privates import socket_identity
from .call import is_cluster, slot_master
from .client import Client

logger = logging.getLogger(__name__)

#: Seconds a blocking read stays below its connection's socket timeout.
SOCKET_MARGIN = 0.25

#: Seconds Redis's own BLPOP timeout is set beyond the wait (a backstop: the wait is ended
#: on time by the client, see `block_pop`).
BACKSTOP = 0.5

#: Shortest block in seconds: Redis reads a BLPOP timeout in whole milliseconds, and one that
#: rounds to 0 would block forever.
MIN_BLOCK = 0.001


def block_limit(client: Client) -> float | None:
    """Longest block in seconds a command on ``client`` may ask for (None: no socket timeout)."""
    if is_cluster(client):
        kwargs = client.nodes_manager.connection_kwargs
    else:
        kwargs = client.connection_pool.connection_kwargs
    timeout = kwargs.get("socket_timeout")
    if timeout is None:
        return None
    return max(float(timeout) - SOCKET_MARGIN, float(timeout) / 2)


def block_pop(client: Client, keys: Sequence[str], timeout: float) -> str | None:
    """BLPOP ``keys`` (all of one slot on a cluster) for up to ``timeout`` seconds, once.

    Returns the key an element was popped from, or None when the wait ended empty, was too
    short to send, or Redis failed (logged at debug: the caller's next command reports it).

    Redis ends a BLPOP's timeout only on its cron ticks (``hz``: every 100 ms by default), so
    the deadline is kept here: the reply is awaited for ``timeout``, and a BLPOP still blocked
    then is ended with ``CLIENT UNBLOCK`` from another connection (one round trip, only when
    nothing woke it). Redis's own timeout, a little later, is the backstop.
    """
    limit = block_limit(client)
    backstop = timeout + BACKSTOP
    if limit is not None:
        timeout, backstop = min(timeout, limit), min(backstop, limit)
    if timeout < MIN_BLOCK or not keys:
        return None
    target = slot_master(client, keys[0]) if is_cluster(client) else client
    if target is None:
        return None
    connection_pool = target.connection_pool
    try:
        conn = connection_pool.get_connection()
    except redis.exceptions.RedisError as exc:
        logger.debug("wake signal: no connection (%s)", exc)
        return None
    try:
        reply = _exchange(connection_pool, conn, keys, timeout, backstop)
    except redis.exceptions.ResponseError as exc:  # an error reply (MOVED...): in step
        logger.debug("wake signal: BLPOP refused (%s)", exc)
        return None
    except redis.exceptions.RedisError as exc:
        conn.disconnect()  # the reply may still come on this connection
        logger.debug("wake signal: BLPOP failed (%s)", exc)
        return None
    except BaseException:
        conn.disconnect()
        raise
    finally:
        connection_pool.release(conn)
    if not reply:
        return None
    key = reply[0]
    return key.decode() if isinstance(key, bytes) else str(key)


def _exchange(
    connection_pool: redis.connection.ConnectionPool,
    conn: redis.connection.Connection,
    keys: Sequence[str],
    timeout: float,
    backstop: float,
) -> list[bytes | str] | None:
    """BLPOP's reply: ``[key, element]``, or None when the wait ended empty."""
    client_id = _client_id(conn)
    started = time.monotonic()
    conn.send_command("BLPOP", *keys, f"{backstop:.3f}")
    if not conn.can_read(timeout=max(timeout - (time.monotonic() - started), 0.0)):
        # Nothing woke it: end it now (its reply is then nil, or a token that just came).
        other = connection_pool.get_connection()
        try:
            other.send_command("CLIENT", "UNBLOCK", client_id)
            other.read_response()
        except BaseException:
            other.disconnect()
            raise
        finally:
            connection_pool.release(other)
    # redis-py leaves read_response unannotated; BLPOP replies a [key, element] pair or nil.
    reply: list[bytes | str] | None = conn.read_response()
    return reply


#: Per connection: the socket it had and the server's id for it (``CLIENT ID``), which
#: ``CLIENT UNBLOCK`` takes. A reconnect gives a new socket, so a new id is asked for.
_ids: weakref.WeakKeyDictionary[redis.connection.Connection, tuple[int, int]] = (
    weakref.WeakKeyDictionary()
)


def _client_id(conn: redis.connection.Connection) -> int:
    known = _ids.get(conn)
    sock = socket_identity(conn)
    if known is not None and sock is not None and known[0] == sock:
        return known[1]
    conn.send_command("CLIENT", "ID")
    client_id = int(conn.read_response())
    _ids[conn] = (socket_identity(conn) or 0, client_id)
    return client_id

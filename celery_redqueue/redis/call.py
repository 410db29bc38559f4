"""The one way a script reaches Redis: `run_script()`, sent once, never retried behind the caller.

redis-py (6+) re-sends a command after a ``ConnectionError`` on read, and a user's
``redqueue_redis_options`` may configure any ``Retry``. For a script that is a second run after
a lost reply: a store kept twice, a pop that overwrote its own batch. So a script is sent on a
connection of the client's own connection pool through redis-py's connection API
(``get_connection``, ``send_packed_command``, ``read_response``: no command path, no
``Retry``), and what a lost reply means is decided here from the script's header (``-- Lost
reply:``, see `lua`): a script that is safe to run twice is sent again on a fresh connection;
any other raises [`ReplyLostError`][celery_redqueue.ReplyLostError] ("may have been applied").
A send that fails ran nothing (Redis runs no incomplete command) and is sent again.

The connection pool is the client's, so forks, Sentinel rediscovery and a connection the
server closed while idle (redis-py's connection pool checks one before lending it) are handled
as for every other command; errors come back translated (`client.translate_error()`). On
Redis Cluster the call goes to the master serving the keys' slot, through that node's own
client (the cluster client's command path would retry it); MOVED and ASK are followed here,
TRYAGAIN and CLUSTERDOWN waited out (none of them ran the script).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.cluster
import redis.connection

from ..errors import ReplyLostError
from .client import Client, translate_error

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from .lua import KeyOrArg, LuaScript

#: Sends of one call: redirections, NOSCRIPT, waits of a changing cluster, and re-sends of a
#: script that is safe to run twice after a lost reply (a CLIENT KILL storm may drop several).
MAX_SENDS = 5

#: Seconds to wait before sending again when a cluster answers TRYAGAIN or CLUSTERDOWN.
CLUSTER_WAIT = 0.1


# Here, not in blocking.py: every script call asks, and a reader of the call path stays in one
# module.
# TypeIs: of the `Client`s the package builds only a RedisCluster has get_node_from_key.
def is_cluster(client: object) -> TypeIs[redis.cluster.RedisCluster]:
    """True for a Redis Cluster client (keys of several slots cannot share one command)."""
    return hasattr(client, "get_node_from_key")


def slot_master(client: redis.cluster.RedisCluster, key: KeyOrArg) -> redis.Redis | None:
    """The client of the cluster master serving ``key``'s slot, or None when none does."""
    node = client.get_node_from_key(key)
    return None if node is None else node.redis_connection


class _Lost(Exception):
    """A reply did not arrive after the script was sent (it may have run)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Again(Exception):
    """Nothing ran; send again (after a redirection, a NOSCRIPT load, a cluster wait, a send
    on a connection that broke)."""


#: One command as sent: RESP bytes, in pieces (redis-py's ``send_packed_command`` takes a list).
Packed = list[bytes]


class Front:
    """The start of one script call, packed once: ``EVALSHA sha numkeys keys... head...``.

    Why packed here, not by redis-py's ``send_command``: its packer encodes every argument on
    every call, and a structure's keys and settings (its script head) never change. A pooled
    ``.delay()`` sends 13 keys and 5 settings before its own 2 arguments; packing those 18 once
    took its script call from 195.6 to 147.1 us (1,000 calls x 20 interleaved rounds, the same
    run, a connection of the client's connection pool either way; bench/pool_bench.py's rows
    "raw EVALSHA of the same script" and "the same script, all arguments packed per call").
    The bytes are what redis-py's packer makes (its client's `Encoder`), sent with its public
    ``send_packed_command``; only the RESP framing is written here.
    """

    __slots__ = ("count", "data", "encode")

    def __init__(self, client: Client, values: Sequence[KeyOrArg]) -> None:
        self.encode = client.get_encoder().encode
        self.count = len(values)
        self.data = b"".join(_bulk(self.encode(value)) for value in values)

    def pack(self, args: Sequence[KeyOrArg]) -> Packed:
        """The whole command: this front, then ``args``."""
        encode = self.encode
        pieces = [b"*%d\r\n" % (self.count + len(args)), self.data]
        for arg in args:
            pieces.append(_bulk(arg if type(arg) is bytes else encode(arg)))
        return [b"".join(pieces)]


def _bulk(value: bytes | memoryview) -> bytes:
    if isinstance(value, memoryview):  # redis-py's Encoder passes one through
        value = value.tobytes()
    return b"$%d\r\n%b\r\n" % (len(value), value)


def pack_front(
    client: Client, script: LuaScript, keys: Sequence[KeyOrArg], head: Sequence[KeyOrArg]
) -> Front:
    """``script``'s call on ``keys`` with the first arguments ``head``, packed for
    `run_script` (a structure keeps one per script: its keys and head do not change)."""
    return Front(client, ["EVALSHA", script.sha, len(keys), *keys, *head])


# The reply's type is the script's (its header's ``Reply:`` line), known to the caller, not
# here; redis-py's read_response is unannotated for the same reason.
def run_script(
    client: Client,
    script: LuaScript,
    keys: Sequence[KeyOrArg],
    args: Sequence[KeyOrArg],
    front: Front | None = None,
) -> Any:
    """Run ``script`` once on ``client`` (a Redis, Sentinel master or RedisCluster client).

    A lost reply (the connection broke after the script was sent) re-sends a script whose
    header says it is safe to run twice, on a fresh connection, and raises
    [`ReplyLostError`][celery_redqueue.ReplyLostError] for any other; a timeout raises for any
    script. Every redis-py error comes back translated (`client.translate_error()`).

    ``front``, from `pack_front` for the same script and ``keys``, holds the command's fixed
    start packed once; ``args`` then follow it. Without it everything is packed here.
    """
    action = f"running {script.name}"
    if front is None:
        front = pack_front(client, script, keys, ())
    tail = front.pack(args)
    # Holds the ASK target's ClusterNode, then that node's client (unannotated in redis-py).
    asking: Any = None
    for _ in range(MAX_SENDS):
        try:
            target = asking or _node_for(client, keys)
            return _send_once(target, script, tail, asking is not None)
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
            if not is_cluster(client):  # a plain client sent to a cluster node: no map to follow
                raise translate_error(exc, action) from exc
            _follow_moved(client.nodes_manager, exc)
        except redis.exceptions.AskError as exc:
            if not is_cluster(client):
                raise translate_error(exc, action) from exc
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


# The manager's methods differ across the supported redis-py versions, hence no one type.
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


# Returns a redis.Redis; typed loosely as redis-py leaves a ClusterNode's client unannotated.
def _node_for(client: Client, keys: Sequence[KeyOrArg]) -> Any:
    """The client to send to: ``client`` itself, or the master serving the keys' slot."""
    if not is_cluster(client):
        return client
    if not keys:
        return client.get_random_node().redis_connection
    target = slot_master(client, keys[0])
    if target is None:
        raise redis.exceptions.ClusterDownError(f"no node serves the slot of {keys[0]!r}")
    return target


def _send_once(target: redis.Redis, script: LuaScript, command: Packed, ask: bool) -> Any:
    """Send one packed EVALSHA on a connection of ``target`` and read its reply; raises _Lost
    when the reply did not come, _Again when nothing ran and the caller should send again."""
    single = getattr(target, "connection", None)
    if single is not None:  # a single-connection client: its lock, its connection
        with getattr(target, "single_connection_lock", contextlib.nullcontext()):
            _ready(single)
            return _exchange(single, script, command, ask)
    connection_pool = target.connection_pool
    # Lent connected (redis-py's connection pool reconnects one the server closed while idle):
    # a failure here sent nothing, and is an outage the caller reports.
    conn = connection_pool.get_connection()
    try:
        return _exchange(conn, script, command, ask)
    finally:
        connection_pool.release(conn)


def _ready(conn: redis.connection.ConnectionInterface) -> None:
    """Make a single-connection client's connection ready for a command, as redis-py's
    connection pool does for the connections it lends: one the server closed while idle
    (readable: EOF, or stray bytes) is reconnected first, or its send would look like a lost
    reply."""
    try:
        stale = conn.can_read()  # connects one that is not connected yet
    except redis.exceptions.ConnectionError:
        stale = True
    if stale:
        conn.disconnect()
        conn.connect()


def _exchange(
    conn: redis.connection.ConnectionInterface, script: LuaScript, command: Packed, ask: bool
) -> Any:
    try:
        if ask:
            conn.send_command("ASKING")
            conn.read_response()
        conn.send_packed_command(command)
    except redis.exceptions.ConnectionError:
        # Nothing ran: an open connection broke under us. Send again on a fresh one.
        conn.disconnect()
        raise _Again() from None
    except BaseException:
        conn.disconnect()
        raise
    try:
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

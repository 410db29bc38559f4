"""The package's exception hierarchy: everything raised on purpose derives from RedQueueError."""

from __future__ import annotations


class RedQueueError(Exception):
    """Base class of every error celery-redqueue raises on purpose."""


class ConfigurationError(RedQueueError, ValueError):
    """A setting or task option is missing or invalid; the message names it."""


class BrokerConfigurationError(ConfigurationError):
    """The broker can never take a drain job: its kombu transport cannot be loaded (a client
    library, or a module the transport imports, is not installed), its URL cannot be read, or a
    send fails with an error that is not a broker being down. Raised when a task binds to its
    app (finalize) or at the call (the call is then stored, its drain flag released); the
    original error is chained. Install what the message names, or fix the broker settings.
    """


class SerializationError(RedQueueError, ValueError):
    """A call's arguments cannot be serialized (nothing was stored) or a payload cannot be read."""


class InvalidArgumentError(RedQueueError, ValueError):
    """A call's argument (``countdown``, ``eta``, ...) is invalid; nothing was stored."""


class RedisUnavailableError(RedQueueError, ConnectionError):
    """The Redis server cannot be reached, did not answer in time (a stalled or overloaded
    server), is loading its data, or is a read-only replica; the redis-py error is chained.

    After a timeout, a write may or may not have been applied: Redis may have run it and
    failed to answer.
    """


class ReplyLostError(RedisUnavailableError):
    """A script was sent but its reply never arrived (the connection broke, or Redis did not
    answer in time): it **may have been applied**. Raised only by scripts that are not safe to
    run twice (stores: ``add``, ``enqueue``, ``publish``, buffered flushes, ``add_many``); they
    are never sent again behind the caller's back. Whether to call again (a possible duplicate)
    or not (a possible loss) is the caller's choice; a pooled call's ``dedupe_id`` makes calling
    again safe. docs/failure-modes.md lists what each script does with a lost reply.
    """


class RedisCommandError(RedQueueError):
    """Redis refused a command or a script failed (``WRONGTYPE`` on a key another program
    wrote, a script error, ...); the redis-py error is chained."""


class RedisFullError(RedisCommandError):
    """Redis is at ``maxmemory`` under ``noeviction`` and refused a write.

    Nothing of the call was written (Redis refuses a script before its first write, and every
    change is one script); reads, pops, acks and the reaper still work, which is how a full
    Redis drains. Raise ``maxmemory``, or let consumers catch up.
    """


class ReservationError(RedQueueError, ValueError):
    """A reservation or lease id is malformed or belongs to another structure."""


class PickleWarning(UserWarning):
    """Pickle was chosen as serializer: loading pickles from a shared Redis can execute code."""


class NoFreeResourceError(RedQueueError):
    """Every resource of the LeasedResources is leased (or it has none)."""


class UndecodableItemsError(SerializationError):
    """Popped members could not be deserialized (were they written with another serializer?).

    The pop already removed them from Redis, so nothing is lost with the exception: ``items``
    holds what was decoded, in order, and ``raw`` the members that were not.
    """

    def __init__(self, message: str, items: list[object], raw: list[bytes]) -> None:
        super().__init__(message)
        self.items = items
        self.raw = raw


class RedisServerNotFound(RedQueueError):
    """No usable redis-server binary was found."""


class ReceiptNotReadyError(RedQueueError):
    """A buffered call's receipt was read before its buffer stored it (or it was discarded)."""


class CallRefusedError(RedQueueError):
    """The structure refused a call (a full ``reject`` pool or bucket key, a duplicate): with
    per-call results on, this is the call's result, so whoever waits on its id learns it."""


class UniqueLockedError(CallRefusedError):
    """A unique task's key is held by another call: ``key`` names it, ``holder`` is the task
    id of the call that holds it (``AsyncResult(holder)`` follows that one)."""

    def __init__(self, message: str, key: str = "", holder: str = "") -> None:
        super().__init__(message, key, holder)
        self.key = key
        self.holder = holder

    def __str__(self) -> str:
        return str(self.args[0])


class CallLostError(RedQueueError):
    """A stored call was lost without running to its end: its batch was taken back from a dead
    worker by an at-most-once pool (counted ``lost``; the body may have started), or a later
    call pushed it out of a full ``sample`` or ``newest`` pool (counted ``evicted``). With
    per-call results on, this is the call's result, so whoever waits on its id learns it
    instead of waiting forever."""


class CorruptDataError(RedQueueError, ValueError):
    """A structure's stored field cannot be read (another program wrote it, or it was
    corrupted); the message names the structure's key and the field."""


class KeyBackoff(RedQueueError):
    """Raised by a bucket task's body (an upstream answered 429): pause this call's key for
    ``seconds`` in every worker, and put the call back at the head of its key without counting
    a receive, so backing off never dead-letters it. Other keys go on. ``cost``: the units the
    upstream counted for the refused call (None: none, its charge is refunded).

    Example:

        response = session.post(url, json=body)
        if response.status_code == 429:
            raise retry_after(response.headers.get("Retry-After"), default=5)
    """

    def __init__(self, seconds: float, *, cost: float | None = None) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds < 86400 * 366
        ):
            raise InvalidArgumentError(f"KeyBackoff needs 0 <= seconds < a year, got {seconds!r}")
        super().__init__(f"back off this key for {seconds:g} s")
        self.seconds = float(seconds)
        self.cost = cost


def retry_after(value: str | int | float | None, *, default: float = 1.0) -> KeyBackoff:
    """A [`KeyBackoff`][celery_redqueue.KeyBackoff] from an HTTP ``Retry-After`` value: seconds
    (``"20"``) or an HTTP date (``"Wed, 21 Oct 2015 07:28:00 GMT"``; a date in the past is 0 s).
    ``default`` when the header is missing or unreadable."""
    import email.utils
    import time

    if isinstance(value, int | float) and not isinstance(value, bool):
        return KeyBackoff(max(float(value), 0.0))
    text = (value or "").strip() if isinstance(value, str) else ""
    try:
        return KeyBackoff(max(float(text), 0.0))
    except (ValueError, InvalidArgumentError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return KeyBackoff(default)
    return KeyBackoff(min(max(when - time.time(), 0.0), 86400 * 365.0))

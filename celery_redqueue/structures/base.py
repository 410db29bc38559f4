"""What every queue structure shares: client, keys, serializer, script calls, registration,
encoding, dead-letter tools and clearing.

A structure kind is a subclass with a ``kind`` name and the ``PARTS`` its scripts receive;
defining it adds it to the `catalog`, so the reaper, figures and CLI can reopen any
registered structure from its recorded settings without importing user code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..redis.call import Front, pack_front
from ..redis.client import redis_errors
from ..redis.keys import StructureKeys
from ..redis.lua import KeyOrArg, script
from ..redis.serializers import Serializer, get_serializer, to_bytes
from . import catalog
from .deadletters import CHUNK, UNREADABLE, DeadLetter, parse_dead_letter, readable

if TYPE_CHECKING:
    from ..redis.client import Client
    from .protocols import Renewable
    from .receipts import ReapResult

#: Default seconds of the drain lease: how long a drain job that is sent or running keeps the
#: structure's drain flag without renewing it. A job that dies (or was never sent) frees the
#: structure this long after its last renewal; a running job renews it every pop and, while a
#: body runs, every third of this from the worker's heartbeat.
DRAIN_LEASE = 10.0

#: Most script calls with keys of their own (a stream group's) whose packed start a structure
#: keeps (`Structure._run`): a stream's groups are few, but its callers may name any group
#: (the dashboard reads every group found in Redis), so past this they are packed per call.
MAX_FRONTS = 256


def decode_ids(reply: Iterable[object]) -> list[str]:
    """A script's list of ids, as text."""
    return [r.decode() if isinstance(r, bytes) else str(r) for r in reply]


class Structure(catalog.Registered):
    """Base of pools, buckets and other queue structures (not used directly).

    Subclasses set ``kind`` (the middle of the hash tag: ``prefix:{<kind>:<name>}:<part>``),
    ``parts`` (the keys every script of the kind receives, in order), implement
    `settings()` and `_script_head()` (the arguments every script of the kind takes
    first).
    """

    kind: ClassVar[str]
    parts: ClassVar[Sequence[str]]
    #: The kind's dead-letter script: takes ``action, limit, *entries``, returns
    #: ``{count, send_drain}``.
    dead_script: str
    #: Counters a call dead-lettered before it was stored adds one to (see bury_unstored).
    unstored_counters: tuple[str, ...] = ("dead",)
    #: Dead letters of this kind carry their key (buckets).
    keyed_letters = False
    _head: list[KeyOrArg] | None = None

    if TYPE_CHECKING:
        # Every kind answers it (pools, buckets, streams): the reaper reopens any of them from
        # the catalog and reaps it.
        def reap(self) -> ReapResult: ...

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            catalog.add_kind(cls.kind, cls)

    def _setup(
        self,
        client: Client,
        name: str,
        prefix: str,
        serializer: str | Serializer | None,
        register: bool = True,
    ) -> None:
        self.client = client
        self.name = name
        self.serializer = get_serializer(serializer)
        self.keys = StructureKeys(prefix, self.kind, name)
        self._keys = [self.keys(part) for part in self.parts]
        self._registered = not register
        #: Per script with a ``-- Parts:`` line, the keys it names (see redis/lua.py).
        self._keys_of: dict[str, list[str]] = {}
        #: Per script, its call's start as sent (`_run`); per script and keys of its own, under
        #: ``(name, *keys)``, at most `MAX_FRONTS` of those.
        self._fronts: dict[str | tuple[str, ...], Front] = {}
        #: `_script_head()`, taken on the first script call (a shard's, after its settings
        #: are adjusted): the settings it reads do not change once the structure is built.
        self._head: list[KeyOrArg] | None = None

    def _script_head(self) -> list[KeyOrArg]:
        """The arguments every script of this kind takes before its own."""
        raise NotImplementedError

    def _run(self, name: str, args: Sequence[KeyOrArg], keys: Sequence[str] | None = None) -> Any:
        """Run script ``name`` with this structure's keys (or ``keys``) and the common head.

        A script whose header names the key parts it receives (``-- Parts:``) gets exactly
        those; any other all of `parts`. The first call of a process records the
        structure in the registry.
        """
        if not self._registered:
            self.register_once()
        lua = script(name)
        head = self._head
        if head is None:
            head = self._head = self._script_head()
        # The script's keys and head, packed once (redis/call.py's Front says why).
        if keys is not None:
            own = (name, *keys)
            front = self._fronts.get(own)
            if front is None:
                front = pack_front(self.client, lua, keys, head)
                if len(self._fronts) < MAX_FRONTS:
                    self._fronts[own] = front
            return lua(self.client, keys, args, front)
        front = self._fronts.get(name)
        if front is None:
            keys = self._keys if lua.parts is None else self._named_keys(lua.name, lua.parts)
            front = self._fronts[name] = pack_front(self.client, lua, keys, head)
        else:
            keys = self._keys_of.get(name, self._keys)
        return lua(self.client, keys, args, front)

    def _named_keys(self, name: str, parts: Sequence[str]) -> list[str]:
        keys = self._keys_of.get(name)
        if keys is None:
            unknown = [part for part in parts if part not in self.parts]
            if unknown:
                raise ValueError(f"lua/{name}.lua names parts {self.kind} has not: {unknown}")
            keys = self._keys_of[name] = [self.keys(part) for part in parts]
        return keys

    def release_drain(self, *, flag: bool = True, wake: bool = False) -> None:
        """Clear the drain flag (and/or the scheduled wake-up) when the drain job it announced
        could not be sent, so the next call or beat sends one instead of waiting out the lease.
        Only the flag's own keys are touched."""
        keys = [self.keys(part) for part, on in (("drains", flag), ("wake", wake)) if on]
        if keys:
            with redis_errors(f"releasing the drain flag of {self.keys.base}"):
                self.client.delete(*keys)

    def encode(self, payload: object) -> bytes:
        """Serialize one payload as it will be stored (raises SerializationError)."""
        return to_bytes(self.serializer.dumps(payload))

    def clear(self) -> None:
        """Delete everything of this structure (its own keys only)."""
        with redis_errors(f"clearing {self.keys.base}"):
            self.client.delete(*self._keys)

    # Dead letters: list, requeue and purge (pools, buckets, streams)

    def dead_letters(self, start: int = 0, stop: int = 99) -> list[DeadLetter]:
        """Dead letters from the oldest: payload, receives, last error (and key, count)."""
        with redis_errors("reading dead letters"):
            raw = self.client.lrange(self.keys("dead"), start, stop)
        return [self._parse_letter(entry) for entry in raw]

    def _parse_letter(self, raw: bytes) -> DeadLetter:
        if not readable(raw):  # still listed, with its bytes: it can be looked at and purged
            return DeadLetter(raw, 0, UNREADABLE, 0.0, raw=raw)
        return parse_dead_letter(raw, self.serializer)

    def _act_on_dead(self, action: str, letters: Iterable[DeadLetter] | None, limit: int) -> int:
        if letters is not None:
            raws = [letter.raw for letter in letters]
            return int(self._run(self.dead_script, [action, 0, *raws])[0]) if raws else 0
        # The oldest ``limit``: read a window, name its letters to the script. A letter that
        # cannot be requeued stays where it is, so the next window starts after it: a run of
        # them at the head never stops the letters behind it being requeued.
        total = offset = 0
        while limit != 0:
            chunk = CHUNK if limit < 0 else min(limit, CHUNK)
            with redis_errors("reading dead letters"):
                window = self.client.lrange(self.keys("dead"), offset, offset + chunk - 1)
            if not window:
                break
            named = [raw for raw in window if action == "purge" or readable(raw)]
            count = int(self._run(self.dead_script, [action, 0, *named])[0]) if named else 0
            total += count
            # Letters the script refused (or that went meanwhile) are stepped over too.
            offset += len(window) - (len(named) if count else 0)
            limit = limit - len(named) if limit > 0 else limit
        return total

    def bury_unstored(self, payload: bytes, error: str) -> None:
        """Dead-letter a call that never entered the structure (a by-name message that could
        not be stored as a call), with ``error`` as its reason; counted so that the structure's
        identities still hold."""
        with redis_errors(f"dead-lettering a call in {self.keys.base}"):
            script("dead_letter_unstored")(
                self.client,
                [self.keys("dead"), self.keys("stats")],
                [payload, error, "1" if self.keyed_letters else "0", *self.unstored_counters],
            )

    def requeue_dead(self, letters: Iterable[DeadLetter] | None = None, limit: int = -1) -> int:
        """Put dead letters back in the queue with their receives reset: the ``letters`` given,
        or the oldest ``limit`` (-1: all). Returns how many calls or items went back."""
        return self._act_on_dead("requeue", letters, limit)

    def purge_dead(self, letters: Iterable[DeadLetter] | None = None, limit: int = -1) -> int:
        """Delete dead letters (counted as ``purged``): the ``letters`` given, or the oldest
        ``limit`` (-1: all). Returns how many."""
        return self._act_on_dead("purge", letters, limit)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.keys.base}>"


def renew_pipelined(group: Sequence[tuple[Renewable, Sequence[str]]]) -> list[list[str] | None]:
    """Renew held ids of several structures on one client in one round trip (a pipeline of
    their renew scripts). Per structure: the ids no longer held, or None when its call failed
    (the caller retries that one alone, which also loads a script the server lacks)."""
    pipe = group[0][0].client.pipeline(transaction=False)
    for structure, ids in group:
        name, keys, args = structure.renew_call(ids)
        pipe.evalsha(script(name).sha, len(keys), *keys, *args)
    try:
        replies = pipe.execute(raise_on_error=False)
    except Exception:
        return [None] * len(group)
    return [decode_ids(r) if isinstance(r, list) else None for r in replies]

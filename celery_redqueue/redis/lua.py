"""Lua scripts, one file per atomic operation, loaded once and called by SHA.

Every script in ``lua/`` follows one contract:

* **Header**: what it does, then every ``KEYS[i]`` and ``ARGV[i]`` by name (the keys and
  settings every script of a structure receives are named once, in ``<kind>_keys.lua``, and
  a script names the range it receives), then a ``Reply:`` line; ``Bounded:`` says its cost.
* **Arguments** are read into named locals at the top (the shared ones by the kind's key table), and
  checked before the first write: Redis does not roll back a script that fails half-way.
* **Reply**: one value when the script has one result (a count, a score, a list of ids);
  otherwise an array of fields in the order its ``Reply:`` line names them, variable-length
  parts last. "Send a drain job" is always a field of its own, ``send_drain`` (1|0; with
  ``wake_in_ms`` when a job should be sent with a countdown), never a special value of another
  field. A script that takes work out (``pool_pop``, ``bucket_dequeue``, ``stream_read``)
  replies a status first: one of `EMPTY`, `TAKEN`, `LINGER`, `AGAIN`,
  `LATER`, `UPKEEP`, `MIXED` (``take_status.lua`` names the same values). Times with a fraction of a
  millisecond travel as ``"%.17g"`` strings (Lua's ``tostring`` keeps 14 digits).
* **Errors**: a malformed argument is an error reply ``ERR <script>: <what>``, before any write.
* **Lost reply**: a header line ``-- Lost reply: safe to run twice (why)`` or
  ``-- Lost reply: raises (why)`` says what a second run would do, and is what the call path
  does when a reply is lost (`call`): send it again, or raise ``ReplyLostError``.
  Every script has one; docs/failure-modes.md tabulates them.
* **Keys**: a script that receives only some of its structure's keys names them, in order, on
  a header line ``-- Parts: items stats ...``; the structure passes exactly those (see
  `LuaScript.parts`). Without it a script receives all of them.

Helpers shared by several scripts live in included files (``--#include name``, see
`script()`), in the shape of BullMQ's includes: one helper function per file, taking its keys
and values as parameters (a pool's helpers take one ``pool`` table, ``pool_keys.lua``), and
each file includes what it calls; an include line stands at column 0, never inside a block.
``tests/unit/test_lua_shape.py`` checks that shape, and that a script as sent stays under 250
lines; the files of the kinds not converted yet are listed there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from .call import Front, run_script

if TYPE_CHECKING:
    from .client import Client

KeyOrArg = str | bytes | int | float

_T = TypeVar("_T")

#: The first field of a reply of a script that takes work out (pool_pop, bucket_dequeue,
#: stream_read): nothing to hand out, the drain flag released in the same step (so nothing
#: arriving afterwards is stranded); work handed out; nothing, the flag kept (linger); only
#: skipped entries and more wait (take again at once); nothing may go before the reply's wait;
#: nothing taken, run the structure's upkeep script (due delayed work) and take again; nothing
#: taken, the entries need the general script (``pool_pop_mixed``): run it instead.
EMPTY, TAKEN, LINGER, AGAIN, LATER, UPKEEP, MIXED = 0, 1, 2, 3, 4, 5, 6


#: The header line that says what a lost reply means for a script (see the module docstring).
LOST_REPLY = "-- Lost reply:"
#: The header line naming the keys a script receives, when not all of its structure's.
PARTS = "-- Parts:"


class LuaScript:
    """One script: its SHA is computed locally; the server loads it on the first NOSCRIPT.

    ``source`` is what is sent (comment lines dropped, see `script()`); the header lines are
    read from ``headers``, the expanded file (``source`` when not given).

    ``resend`` is True when the header says the script is safe to run twice (a lost reply is
    sent again), False when it says ``raises``; ``parts`` the key parts it receives, in order,
    or None for all of its structure's.
    """

    def __init__(self, name: str, source: str, headers: str | None = None) -> None:
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        headers = source if headers is None else headers
        self.resend = _lost_reply_kind(name, headers) == "safe"
        self.parts: tuple[str, ...] | None = None
        for line in headers.splitlines():
            if line.startswith(PARTS):
                self.parts = tuple(line[len(PARTS) :].split())
                break

    # The reply's type is the script's own (its ``Reply:`` line): the caller unpacks it.
    def __call__(
        self,
        client: Client,
        keys: Sequence[KeyOrArg],
        args: Sequence[KeyOrArg],
        front: Front | None = None,
    ) -> Any:
        return run_script(client, self, keys, args, front)


def _lost_reply_kind(name: str, source: str) -> str:
    """ "safe" or "raises", from the script's own ``-- Lost reply:`` line (it must have one)."""
    for line in source.splitlines():
        if line.startswith(LOST_REPLY):
            kind = line[len(LOST_REPLY) :].split(maxsplit=1)
            if kind and kind[0] in ("safe", "raises"):
                return kind[0]
            break
    raise ValueError(f"lua/{name}.lua: no '{LOST_REPLY} safe ...' or '... raises ...' line")


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
    for number, line in enumerate(_read(name).splitlines(), 1):
        if line.startswith(INCLUDE):
            included = line[len(INCLUDE) :].strip()
            if included not in seen:
                seen.add(included)
                lines.extend(_expand(included, seen))
        elif line.lstrip().startswith(INCLUDE):
            # Spliced inside a block, its helpers would be defined there only (and hide the
            # script's shape): an include stands at column 0.
            raise ValueError(f"lua/{name}.lua:{number}: an include inside a block: {line.strip()}")
        else:
            lines.append(line)
    return lines


def code_of(line: str) -> str:
    """``line`` without its ``--`` comment (a ``--`` inside a quoted string is code)."""
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif line.startswith("--", i):
            return line[:i]
        i += 1
    return line


def _sent(lines: list[str]) -> list[str]:
    """The lines Redis needs: without comment-only and blank lines (the files are the
    documentation; the headers are read before this step). Long brackets (``--[[ ... ]]``,
    ``[[ ... ]]``) are refused: a line-based reading would keep half of one."""
    for number, line in enumerate(lines, 1):
        if "[[" in line or "[=" in line:
            raise ValueError(f"line {number}: long brackets are not supported: {line.strip()}")
    return [line for line in lines if code_of(line).strip()]


@cache
def script(name: str) -> LuaScript:
    """Return the script ``lua/<name>.lua`` (read once per process).

    A line ``--#include other`` is replaced by ``other.lua``: Redis has no modules, and helpers
    shared by several scripts should be written once. A file included twice (``pool_id`` by
    way of two helpers) is spliced in once, where first met. Each file includes exactly what it
    calls (``tests/unit/test_lua_shape.py`` checks), so what is sent is the expanded file
    without its comment lines: nothing to link.
    """
    lines = _expand(name, {name})
    return LuaScript(name, "\n".join(_sent(lines)) + "\n", headers="\n".join(lines))


def read_atomic(client: Client, reads: Sequence[tuple[str, str, Sequence[KeyOrArg]]]) -> list[Any]:
    """Run read-only commands ``(name, key, extra args)`` in one atomic step; one reply each.

    A consistent snapshot like MULTI/EXEC, but Redis serves it at maxmemory too (it refuses every
    command of a MULTI then), which is when an operator needs the figures. A nil reply comes
    back as None; HGETALL as a flat list (see `pairs()`). All keys must share a hash tag.
    """
    keys: list[KeyOrArg] = []
    args: list[KeyOrArg] = []
    for name, key, extra in reads:
        if key not in keys:
            keys.append(key)
        args.extend((name, keys.index(key) + 1, len(extra), *extra))
    # Lua turns a nil into false, which redis-py reads as None.
    return list(script("read_atomic")(client, keys, args))


def pairs(flat: Sequence[_T]) -> dict[_T, _T]:
    """A flat ``[field, value, ...]`` reply as a dict."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}

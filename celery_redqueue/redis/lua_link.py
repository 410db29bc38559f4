"""What a script sends to Redis: its file with the includes spliced in, then only the helper
functions it calls, without comment lines.

Includes hold families of helpers (every bucket helper in ``bucket_queue``, say), so a script that
calls two of them would otherwise ship all of them: ``bucket_renew`` sent 499 lines to renew
reservations. Redis compiles and caches what it is sent and counts a function's locals against
Lua's limit of 200, so the loader drops what a script never calls, as a linker does:

* a top-level ``local function name(`` (at column 0) runs to the first line that is exactly
  ``end`` (the scripts' layout; a script that breaks it fails to compile in the tests, which load
  every script into a real Redis);
* it is kept when its name is used by a line outside every function, or by a kept function;
  names inside strings count as used, so the rule errs on keeping;
* a top-level line of named values, ``local NAME, OTHER = ...`` (capitals, one line), goes when
  nothing kept uses any of its names (a family of values included for one of its helpers);
* comment-only and blank lines go: the files are the documentation, the headers are read from
  the file before this step.
"""

from __future__ import annotations

import re

_FUNCTION = re.compile(r"local function ([A-Za-z_]\w*)\s*\(")
_NAME = re.compile(r"[A-Za-z_]\w*")
_VALUES = re.compile(r"local ([A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)*) = (.*)$")


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


def _functions(lines: list[str]) -> dict[str, range]:
    """Each top-level function's name and its lines (definition to ``end``)."""
    found: dict[str, range] = {}
    i = 0
    while i < len(lines):
        match = _FUNCTION.match(lines[i])
        if match is None:
            i += 1
            continue
        end = i
        while end < len(lines) and lines[end] != "end":
            end += 1
        if end == len(lines):
            raise ValueError(f"function {match.group(1)}: no 'end' at column 0 after it")
        if match.group(1) in found:
            raise ValueError(f"function {match.group(1)} is defined twice")
        found[match.group(1)] = range(i, end + 1)
        i = end + 1
    return found


def _names(lines: list[str], numbers: range | list[int]) -> set[str]:
    return {name for n in numbers for name in _NAME.findall(code_of(lines[n]))}


def link(lines: list[str]) -> list[str]:
    """The lines of an expanded script that Redis needs (see the module docstring).

    Long brackets (``--[[ ... ]]`` comments, ``[[ ... ]]`` strings) are refused: a line-based
    reading would keep half of one and break the script.
    """
    for number, line in enumerate(lines, 1):
        if "[[" in line or "[=" in line:
            raise ValueError(f"line {number}: long brackets are not supported: {line.strip()}")
    functions = _functions(lines)
    inside = {n for numbers in functions.values() for n in numbers}
    calls = {name: _names(lines, numbers) - {name} for name, numbers in functions.items()}
    kept: set[str] = set()
    reached = _names(lines, [n for n in range(len(lines)) if n not in inside])
    while new := (reached & functions.keys()) - kept:
        kept |= new
        reached = set().union(*(calls[name] for name in new))
    dropped = {n for name, numbers in functions.items() if name not in kept for n in numbers}
    values: dict[int, set[str]] = {}
    used: set[str] = set()
    for n, line in enumerate(lines):
        match = _VALUES.match(code_of(line))
        if n not in inside and match and _balanced(match.group(2)):
            values[n] = set(match.group(1).split(", "))
            used |= set(_NAME.findall(match.group(2)))
    used |= _names(lines, [n for n in range(len(lines)) if n not in dropped and n not in values])
    dropped |= {n for n, names in values.items() if not names & used}
    return [line for n, line in enumerate(lines) if n not in dropped and code_of(line).strip()]


def _balanced(code: str) -> bool:
    """Whether ``code`` closes every bracket it opens (a statement on one line)."""
    return all(code.count(o) == code.count(c) for o, c in ("()", "{}", "[]"))

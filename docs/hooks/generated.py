"""MkDocs hook: the parts of the docs that are read from the code, so they cannot drift.

A page writes a marker on a line of its own and the build puts the generated Markdown there:

- ``<!-- options: PoolTask -->``: a table of that task class's options (every class attribute
  of its kind's prefix, ``pool_*`` ..., with its ``#:`` comment, its type and its default);
- ``<!-- settings -->``: the ``redqueue_*`` settings (the fields of ``RedQueueConfig`` with
  their ``#:`` comments, and the settings read elsewhere, listed in :data:`OTHER_SETTINGS`);
- ``<!-- api -->``: an mkdocstrings entry for every name in ``celery_redqueue.__all__``;
- ``<!-- modules -->``: every module and Lua script of the package with the first sentence of
  its docstring or header comment;
- ``<!-- lost-replies -->``: every script that is run (not only included) with what a lost
  reply does to it, from its ``-- Lost reply:`` header line.

An option or a setting without a comment fails the build (and tests/project/test_docs.py).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "celery_redqueue"

#: The task classes whose options are documented, with their kind's option prefix.
TASK_CLASSES = {
    "PoolTask": "pool_",
    "BucketTask": "bucket_",
    "StreamTask": "stream_",
    "LeaseTask": "lease_",
}

#: Settings read outside ``RedQueueConfig`` (a name found in a ``conf.get("redqueue_...")``
#: anywhere in the package must be a field of it or be listed here): name -> (default, meaning).
OTHER_SETTINGS = {
    "redqueue_dashboard_token": (
        "None",
        "unlocks the dashboard's actions (also `--token` or the `REDQUEUE_DASHBOARD_TOKEN` "
        "environment variable); without one the dashboard is read-only",
    ),
}

#: What the dataclass cannot say about a setting's default.
SETTING_DEFAULTS = {
    "url": "`broker_url`, when it is a Redis URL",
    "serializer": '`"json"`',
}

MARKER = re.compile(r"^<!-- (options: (\w+)|settings|api|modules|lost-replies) -->$", re.M)
SENTENCE = re.compile(r"^(.+?[.])(?:\s|$)", re.S)


class UndocumentedError(Exception):
    """An option or setting has no ``#:`` comment."""


def comments_above(source: str) -> dict[str, str]:
    """``#:`` comments of each assignment in ``source`` (a class or a module), by target name."""
    lines = source.splitlines()
    found: dict[str, str] = {}
    tree = ast.parse(textwrap.dedent(source))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else tree.body
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            name = node.targets[0].id
        else:
            continue
        text: list[str] = []
        index = node.lineno - 2
        while index >= 0 and lines[index].strip().startswith("#:"):
            text.insert(0, lines[index].strip()[2:].strip())
            index -= 1
        if text:
            found[name] = " ".join(text)
    return found


def prose(comment: str) -> str:
    """A ``#:`` comment as Markdown (double backquotes become single ones)."""
    return comment.replace("``", "`")


def default_text(value: Any) -> str:
    if callable(value) and not isinstance(value, type):
        return "a function"
    if isinstance(value, bool) or value is None:
        return f"`{value}`"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"`{value:_}`"
    return f"`{value!r}`"


def annotation_text(node: ast.expr | None) -> str:
    return "" if node is None else f"`{ast.unparse(node)}`"


def task_options(class_name: str) -> list[tuple[str, str, str, str]]:
    """(option, type, default, meaning) of every option of a task class, in source order, its
    own kind's base classes first."""
    import celery_redqueue

    cls = getattr(celery_redqueue, class_name)
    prefix = TASK_CLASSES[class_name]
    rows: dict[str, tuple[str, str, str, str]] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("celery_redqueue"):
            continue
        source = inspect.getsource(klass)
        comments = comments_above(source)
        annotations = {
            node.target.id: node.annotation
            for node in ast.parse(textwrap.dedent(source)).body[0].body  # type: ignore[attr-defined]
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        }
        for name, value in vars(klass).items():
            if not name.startswith(prefix) or inspect.isroutine(value):
                continue
            if isinstance(value, property | classmethod | staticmethod):
                continue
            if name not in comments:
                raise UndocumentedError(
                    f"{klass.__module__}.{klass.__qualname__}.{name} has no #: comment"
                )
            default = getattr(cls, name)
            rows[name] = (
                name,
                annotation_text(annotations.get(name)),
                default_text(default),
                prose(comments[name]),
            )
    return list(rows.values())


def options_table(class_name: str) -> str:
    rows = task_options(class_name)
    out = ["| option | type | default | meaning |", "|---|---|---|---|"]
    out += [f"| `{name}` | {kind} | {default} | {text} |" for name, kind, default, text in rows]
    return "\n".join(out)


def settings_read() -> set[str]:
    """Every ``redqueue_*`` name the package reads from ``app.conf``."""
    pattern = re.compile(r"conf(?:\.get\(|\[)\s*[\"'](redqueue_\w+)[\"']")
    return {
        match.group(1)
        for path in PACKAGE.rglob("*.py")
        for match in pattern.finditer(path.read_text())
    }


def settings() -> list[tuple[str, str, str]]:
    """(setting, default, meaning) of every ``redqueue_*`` setting."""
    config = importlib.import_module("celery_redqueue.tasks.config")
    comments = comments_above(inspect.getsource(config.RedQueueConfig))
    rows: list[tuple[str, str, str]] = []
    for field in dataclasses.fields(config.RedQueueConfig):
        if field.name not in comments:
            raise UndocumentedError(f"RedQueueConfig.{field.name} has no #: comment")
        if field.name in SETTING_DEFAULTS:
            default = SETTING_DEFAULTS[field.name]
        elif field.default is not dataclasses.MISSING:
            default = default_text(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = default_text(field.default_factory())
        else:
            default = "required"
        rows.append((f"redqueue_{field.name}", default, prose(comments[field.name])))
    rows += [(name, f"`{d}`", text) for name, (d, text) in OTHER_SETTINGS.items()]
    documented = {name for name, _, _ in rows}
    missing = settings_read() - documented
    if missing:
        raise UndocumentedError(
            f"settings read but not documented: {', '.join(sorted(missing))} (add a #: field to "
            "RedQueueConfig or an entry to OTHER_SETTINGS in docs/hooks/generated.py)"
        )
    return rows


def settings_table() -> str:
    out = ["| setting | default | meaning |", "|---|---|---|"]
    out += [f"| `{name}` | {default} | {text} |" for name, default, text in settings()]
    return "\n".join(out)


def api_entries() -> str:
    import celery_redqueue

    names = sorted(n for n in celery_redqueue.__all__ if not n.startswith("_"))
    return "\n\n".join(f"::: celery_redqueue.{name}" for name in names)


def first_sentence(text: str) -> str:
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    match = SENTENCE.match(paragraph)
    return prose((match.group(1) if match else paragraph).rstrip("."))


def modules_table() -> str:
    """Every module of the package and every Lua script, with what it is, folder by folder."""
    out = ["| file | what it is |", "|---|---|"]
    for path in sorted(PACKAGE.rglob("*.py"), key=lambda p: (p.parent != PACKAGE, str(p))):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if doc is None:
            raise UndocumentedError(f"{path.relative_to(ROOT)} has no module docstring")
        out.append(f"| `{path.relative_to(PACKAGE)}` | {first_sentence(doc)} |")
    for path in sorted((PACKAGE / "lua").glob("*.lua")):
        header = []
        for line in path.read_text().splitlines():
            if not line.startswith("--") or line.startswith("--#"):
                break
            header.append(line[2:].strip())
        out.append(f"| `lua/{path.name}` | {first_sentence(' '.join(header)) or '-'} |")
    return "\n".join(out)


def lost_replies_table() -> str:
    """Per script that is run (not only included by others): re-sent or raises, and why."""
    lua = PACKAGE / "lua"
    included = set()
    for path in lua.glob("*.lua"):
        included.update(re.findall(r"^\s*--#include (\w+)", path.read_text(), re.M))
    out = ["| script | a lost reply | why |", "|---|---|---|"]
    for path in sorted(lua.glob("*.lua")):
        if path.stem in included:
            continue
        header = []
        for line in path.read_text().splitlines():
            if not line.startswith("--") or line.startswith("--#"):
                break
            header.append(line[2:].strip())
        text = " ".join(header)
        found = re.search(r"Lost reply: (safe to run twice|raises)[:,]? (.*)$", text)
        if found is None:
            raise UndocumentedError(f"{path.relative_to(ROOT)} has no '-- Lost reply:' line")
        why = found.group(2).strip()
        if why.startswith("(") and why.endswith(")"):
            why = why[1:-1]
        kind = "re-sent" if found.group(1).startswith("safe") else "raises `ReplyLostError`"
        out.append(f"| `{path.stem}` | {kind} | {why.replace('|', '/')} |")
    return "\n".join(out)


def expand(markdown: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(2):
            return options_table(match.group(2))
        if match.group(1) == "settings":
            return settings_table()
        if match.group(1) == "modules":
            return modules_table()
        if match.group(1) == "lost-replies":
            return lost_replies_table()
        return api_entries()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: expand the markers of every page."""
    return expand(markdown)

"""MkDocs hook: a page that includes a file from outside ``docs/`` gets that file's links rebased.

``bench/README.md`` is read on its own in a checkout, so its links are relative to ``bench/``
(``../docs/performance.md``), and it is also the body of ``docs/benchmarks.md``
(``--8<-- "bench/README.md"``), where the same target is ``performance.md``. pymdownx.snippets
pastes a file as it is, so for a file outside ``docs/`` this hook does the include itself and
rewrites every relative link from the file's folder to the page's. Files under ``docs/`` are left
to snippets. A rebased link that leads outside ``docs/`` still fails the strict build.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: A snippet line of its own: ``--8<-- "path/from/the/root"``.
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.M)
#: An inline link's or image's target, and a reference definition's.
INLINE = re.compile(r"(\]\()([^)\s]+)")
REFERENCE = re.compile(r"^(\[[^\]]+\]:\s*)(\S+)", re.M)
FENCE = re.compile(r"^(```|~~~)", re.M)


def rebase(target: str, source_dir: str, page_dir: str) -> str:
    """``target`` as written in a file in ``source_dir``, relative to ``page_dir`` instead
    (both folders relative to the repository root)."""
    if target.startswith(("#", "/")) or re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return target
    path, hash_, anchor = target.partition("#")
    moved = posixpath.relpath(posixpath.normpath(posixpath.join(source_dir, path)), page_dir)
    return moved + hash_ + anchor


def rebase_links(text: str, source_dir: str, page_dir: str) -> str:
    """Every relative link of ``text`` rebased, code fences left as they are."""
    parts = FENCE.split(text)
    out: list[str] = []
    inside = False
    for part in parts:
        if part in ("```", "~~~"):
            inside = not inside
            out.append(part)
            continue
        if not inside:
            part = INLINE.sub(lambda m: m[1] + rebase(m[2], source_dir, page_dir), part)
            part = REFERENCE.sub(lambda m: m[1] + rebase(m[2], source_dir, page_dir), part)
        out.append(part)
    return "".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    page_dir = posixpath.dirname((docs_dir / page.file.src_uri).relative_to(ROOT).as_posix())

    def include(match: re.Match[str]) -> str:
        source = (ROOT / match[1]).resolve()
        if source.is_relative_to(docs_dir) or not source.is_file():
            return match[0]  # snippets' own (and its check_paths error for a missing file)
        source_dir = posixpath.dirname(source.relative_to(ROOT).as_posix())
        return rebase_links(source.read_text(encoding="utf-8"), source_dir, page_dir)

    return SNIPPET.sub(include, markdown)

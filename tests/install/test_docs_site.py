"""The docs site builds, warnings as errors, in a fresh virtualenv holding only ``.[docs]``.

Slow (it installs MkDocs, Material, mkdocstrings and the package into a new virtualenv), so it
runs only when ``REDQUEUE_INSTALL_TESTS=1``: ``.ci/run`` runs ``tests/install`` that way in its
docs step; ``REDQUEUE_INSTALL_TESTS=1 .venv/bin/python -m pytest tests/install`` by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("REDQUEUE_INSTALL_TESTS") != "1",
    reason="builds a fresh virtualenv (minutes): set REDQUEUE_INSTALL_TESTS=1 (.ci/run does)",
)


def checkout_copy(into: Path) -> Path:
    """The checkout's files (tracked and new, not ignored ones: no .venv, no site/) copied
    to ``into``, so nothing installed or built in the checkout can help the build."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a file deleted in the work tree but not yet in git is skipped
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def test_the_site_builds_strict_from_a_clean_docs_install(tmp_path):
    tree = checkout_copy(tmp_path / "tree")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", f"{tree}[docs]"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    site = tmp_path / "site"
    build = subprocess.run(
        [str(venv / "bin" / "mkdocs"), "build", "--strict", "--site-dir", str(site)],
        cwd=tree, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    # The pages read from the code and the included bench/README.md, links rebased:
    assert "pool_size" in (site / "configuration" / "index.html").read_text()
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    assert 'href="../performance/#memory-per-stored-call"' in benchmarks
    assert "../docs/" not in benchmarks
    # Only what .[docs] brings: no test or dev tool slipped in to make it work.
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=freeze"],
        capture_output=True, text=True, check=True,
    ).stdout.lower()  # fmt: skip
    assert "mkdocs-material" in listed
    assert not {"pytest", "ruff", "mypy"} & {line.split("==")[0] for line in listed.split()}

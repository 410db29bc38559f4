"""Every ```python block of README.md runs as written, each on its own, against a real Redis.

Blocks use ``redis.Redis()`` and ``redis://localhost:6379/0`` as a user would; here each runs in
a fresh interpreter where those point at a Redis server started for this module (so the names of
the examples must not collide: they share it). A block marked ``<!-- readme-test: skip (why) -->``
on the line before it is not run (the reason must be given); one marked ``<!-- readme-test: verbatim
from PATH -->`` must appear whole in that file, whose own tests run it.
"""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from celery_redqueue.testing.embedded import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(
    r"(?:<!-- readme-test: (skip \(.+?\)|verbatim from \S+) -->\n[ \t]*)?```python\n(.*?)```", re.S
)

PRELUDE = """
import functools, redis
_init = redis.Redis.__init__
@functools.wraps(_init)
def _local(self, *args, **kwargs):
    if not args and not {"host", "connection_pool", "unix_socket_path"} & set(kwargs):
        kwargs.update(host="127.0.0.1", port=PORT)
    _init(self, *args, **kwargs)
redis.Redis.__init__ = _local
"""


def blocks():
    found = []
    for match in BLOCK.finditer(README):
        line = README.count("\n", 0, match.start(2))
        found.append(pytest.param(match.group(2), match.group(1), id=f"README.md:{line}"))
    return found


@pytest.fixture(scope="module")
def server():
    with EmbeddedRedis() as running:
        yield running


def test_the_readme_has_python_blocks():
    assert len(blocks()) >= 15


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("source", "mark"), blocks())
def test_readme_block_runs(server, source, mark):
    if mark and mark.startswith("verbatim from "):
        # A module of an example project, run by that project's own tests.
        assert source in (ROOT / mark.removeprefix("verbatim from ")).read_text()
        return
    if mark:
        assert len(mark) > len("skip ()") + 10, "say why the block is not run"
        pytest.skip(mark)
    # A block inside a list item is indented with the item's text.
    code = PRELUDE.replace("PORT", str(server.port)) + textwrap.dedent(source).replace(
        "localhost:6379", f"127.0.0.1:{server.port}"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=100
    )
    assert result.returncode == 0, f"{source}\n--- stderr ---\n{result.stderr[-3000:]}"


def test_the_pytest_celery_example_is_the_tested_file():
    """The README's testing example is tests/project/test_with_pytest_celery.py, whole."""
    example = (ROOT / "tests" / "project" / "test_with_pytest_celery.py").read_text()
    assert f"```python\n{example}```" in README

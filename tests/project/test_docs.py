"""Every ```python block of README.md and of the pages in docs/ runs as written, each on its
own, against a real Redis; the generated reference pages cover every option and setting.

Blocks use ``redis.Redis()`` and ``redis://localhost:6379/0`` as a user would; here each runs in
a fresh interpreter where those point at a Redis server started for this module (so the names of
the examples must not collide: they share it). A block marked ``<!-- docs-test: skip (why) -->``
on the line before it is not run (the reason must be given); one marked ``<!-- docs-test: verbatim
from PATH -->`` must appear whole in that file, whose own tests run it.
"""

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from celery_redqueue.embedded import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    r"(?:<!-- docs-test: (skip \(.+?\)|verbatim from \S+) -->\n[ \t]*)?```python\n(.*?)```", re.S
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
    for page in PAGES:
        text = page.read_text()
        name = page.relative_to(ROOT)
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start(2))
            found.append(pytest.param(match.group(2), match.group(1), id=f"{name}:{line}"))
    return found


@pytest.fixture(scope="module")
def server():
    with EmbeddedRedis() as running:
        yield running


def test_the_docs_have_python_blocks():
    assert len(blocks()) >= 30


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("source", "mark"), blocks())
def test_docs_block_runs(server, source, mark):
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
    """The docs' testing example is tests/project/test_with_pytest_celery.py, whole."""
    example = (ROOT / "tests" / "project" / "test_with_pytest_celery.py").read_text()
    assert f"```python\n{example}```" in (ROOT / "docs" / "testing.md").read_text()


def _generator():
    path = ROOT / "docs" / "hooks" / "generated.py"
    spec = importlib.util.spec_from_file_location("docs_generated", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("class_name", ["PoolTask", "BucketTask", "StreamTask", "LeaseTask"])
def test_every_task_option_is_in_the_configuration_reference(class_name):
    """Every ``pool_*``/``bucket_*``/... attribute of a task class is a row of its generated
    table, with its comment and its default, and the page asks for that table."""
    import celery_redqueue

    generator = _generator()
    cls = getattr(celery_redqueue, class_name)
    prefix = generator.TASK_CLASSES[class_name]
    options = {
        name
        for klass in cls.__mro__
        for name, value in vars(klass).items()
        if name.startswith(prefix) and not callable(value) and not isinstance(value, property)
    }
    table = generator.options_table(class_name)
    rows = {line.split("`")[1]: line for line in table.splitlines()[2:]}
    assert options and set(rows) >= options
    assert all(row.count("|") >= 5 and not row.endswith("|  |") for row in rows.values())
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert f"<!-- options: {class_name} -->" in page
    assert generator.expand(page).count(f"| `{prefix}") >= len(options)


def test_every_setting_read_is_in_the_configuration_reference():
    generator = _generator()
    documented = {name for name, _, _ in generator.settings()}
    assert "redqueue_url" in documented
    assert generator.settings_read() <= documented
    assert "<!-- settings -->" in (ROOT / "docs" / "configuration.md").read_text()


def test_an_option_without_a_comment_fails_the_generator():
    generator = _generator()
    source = "class T:\n    #: documented\n    pool_a: int = 1\n    pool_b: int = 2\n"
    assert generator.comments_above(source) == {"pool_a": "documented"}


def test_the_api_reference_covers_all_public_names():
    import celery_redqueue

    entries = _generator().api_entries()
    for name in celery_redqueue.__all__:
        if not name.startswith("_"):
            assert f"::: celery_redqueue.{name}\n" in entries + "\n"


def test_the_architecture_page_lists_every_module_and_script():
    table = _generator().modules_table()
    package = ROOT / "celery_redqueue"
    for path in [*package.rglob("*.py"), *(package / "lua").glob("*.lua")]:
        assert f"| `{path.relative_to(package)}` |" in table
    assert "<!-- modules -->" in (ROOT / "docs" / "architecture.md").read_text()


SPHINX_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj|const):`")
LITERAL_MARKER = re.compile(r"\S::\n[ \t]*\n")


def test_docstrings_and_comments_are_markdown():
    """mkdocstrings renders docstrings (and the generator ``#:`` comments) as Markdown: a Sphinx
    role (``:class:`X```) or a ``::`` literal-block marker would show as raw text on the API and
    configuration pages. Write ```X``` or a cross-reference ``[`X`][celery_redqueue.X]``."""
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()!r}"
        for path in sorted((ROOT / "celery_redqueue").rglob("*.py"))
        for text in [path.read_text()]
        for pattern in (SPHINX_ROLE, LITERAL_MARKER)
        for match in pattern.finditer(text)
    ]
    assert found == []

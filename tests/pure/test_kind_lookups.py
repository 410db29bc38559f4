"""No option is looked up by a name built from the kind (issue 31): each kind's class reads
its own ``pool_*``/``bucket_*``/``stream_*`` attributes (``read_drain_settings``,
``read_producer_settings``), so a reader finds where an option is read by searching its name.
A ``getattr``/``hasattr``/``setattr`` whose name is an f-string or a concatenation fails here.
No Redis needed."""

import ast
from pathlib import Path

import celery_redqueue

PACKAGE = Path(celery_redqueue.__file__).parent


def built_name_lookups(source: str) -> list[int]:
    """Lines of attribute lookups whose name is built at run time from pieces."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], (ast.JoinedStr, ast.BinOp))
        ):
            lines.append(node.lineno)
    return lines


def test_the_check_finds_a_built_name():
    assert built_name_lookups('getattr(task, f"{kind}_drain_lease")') == [1]
    assert built_name_lookups('getattr(task, kind + "_results", False)') == [1]
    assert built_name_lookups('getattr(task, "pool_results")') == []


def test_no_option_is_looked_up_by_a_name_built_from_the_kind():
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := built_name_lookups(path.read_text()))
    }
    assert found == {}

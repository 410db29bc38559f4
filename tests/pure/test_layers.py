"""The package's layering, read from the source: arrows point one way.

ops and tasks use structures; structures use the Redis layer; nothing below imports anything
above, and structures never import Celery. No Redis needed.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "celery_redqueue"

#: Layers from the bottom; a module may import only from its own layer or the ones below.
LAYERS = {
    "errors": 0,
    "validation": 0,
    "redis": 1,
    "structures": 2,
    "tasks": 3,
    "ops": 4,
    "web": 4,
    "testing": 4,
    "embedded": 1,
    "embedded_sentinel": 1,
}


def _layer_of(module: str) -> int | None:
    return LAYERS.get(module.split(".")[0])


def _imports(path: Path) -> list[tuple[str, int]]:
    """(module inside the package, line) for every import of the package from ``path``."""
    tree = ast.parse(path.read_text())
    package_parts = path.relative_to(PACKAGE).with_suffix("").parts[:-1]
    if path.name == "__init__.py":
        package_parts = path.relative_to(PACKAGE).parts[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package_parts[: len(package_parts) - (node.level - 1)])
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names = [target] if node.module else [f"{a.name}" for a in node.names]
                found.extend((n, node.lineno) for n in names)
            elif node.module and node.module.startswith("celery_redqueue."):
                found.append((node.module.removeprefix("celery_redqueue."), node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("celery_redqueue."):
                    found.append((alias.name.removeprefix("celery_redqueue."), node.lineno))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if _layer_of(_name(p)) is not None)


def _name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_imports_point_down(path):
    own = _layer_of(_name(path))
    upward = [
        f"line {line}: {target}"
        for target, line in _imports(path)
        if (layer := _layer_of(target)) is not None and layer > own
    ]
    assert not upward, f"{_name(path)} imports a layer above it: {upward}"


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "structures").glob("*.py")) + sorted((PACKAGE / "redis").glob("*.py")),
    ids=_name,
)
def test_structures_and_redis_layer_know_no_celery(path):
    tree = ast.parse(path.read_text())
    celery_imports = [
        node.lineno
        for node in ast.walk(tree)
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and node.module
            and node.module.split(".")[0] == "celery"
        )
        or (
            isinstance(node, ast.Import)
            and any(a.name.split(".")[0] == "celery" for a in node.names)
        )
    ]
    assert not celery_imports, f"{_name(path)} imports Celery at lines {celery_imports}"


def test_every_lua_include_exists():
    lua = PACKAGE / "lua"
    names = {p.stem for p in lua.glob("*.lua")}
    missing = [
        (p.name, line.split()[1])
        for p in lua.glob("*.lua")
        for line in p.read_text().splitlines()
        if line.lstrip().startswith("--#include ") and line.split()[1] not in names
    ]
    assert not missing


def _module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (at top level or inside functions; imports
    under ``if TYPE_CHECKING:`` aside). ``from . import x`` imports the module ``x``."""
    modules = {_dotted(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = _imported(ast.parse(path.read_text()), package, modules)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _imported(tree: ast.AST, package: str, modules: dict) -> set[str]:
    found: set[str] = set()
    todo = [tree]
    while todo:
        for child in ast.iter_child_nodes(todo.pop()):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                target = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (child.level - 1)]
                    target = ".".join(parts + ([child.module] if child.module else []))
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in modules else target)
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            todo.append(child)
    return found


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycles():
    graph = _module_graph()
    cycles = []
    for start in graph:
        # A path back to ``start``: depth-first over what it imports.
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))

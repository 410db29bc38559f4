"""What the built distributions hold: the wheel has the package with its Lua scripts, dashboard
files and py.typed, and no tests; the sdist has the tests and the docs.

Usage: python .ci/check_dist.py dist/
"""

import sys
import tarfile
import zipfile
from pathlib import Path

folder = Path(sys.argv[1])
(wheel,) = folder.glob("*.whl")
(sdist,) = folder.glob("*.tar.gz")
with zipfile.ZipFile(wheel) as archive:
    names = archive.namelist()
lua = {n for n in names if n.startswith("celery_redqueue/lua/") and n.endswith(".lua")}
source_lua = {p.as_posix() for p in Path("celery_redqueue/lua").glob("*.lua")}
problems = []
if lua != source_lua:
    problems.append(f"Lua scripts: the wheel lacks {sorted(source_lua - lua)[:5]}")
static = {n for n in names if n.startswith("celery_redqueue/ops/static/")}
source_static = {
    f"celery_redqueue/{p.relative_to('celery_redqueue').as_posix()}"
    for p in Path("celery_redqueue/ops/static").rglob("*")
    if p.is_file()
}
if not source_static or static != source_static:
    problems.append(f"dashboard files: the wheel lacks {sorted(source_static - static)[:5]}")
tests = [n for n in names if "/tests/" in f"/{n}" or n.rsplit("/", 1)[-1].startswith("test_")]
if tests:
    problems.append(f"the wheel holds tests: {tests[:5]}")
if "celery_redqueue/py.typed" not in names:
    problems.append("the wheel lacks py.typed")
strays = [n for n in names if not n.startswith(("celery_redqueue/", "celery_redqueue-"))]
if strays:
    problems.append(f"the wheel holds more than the package: {strays[:5]}")
with tarfile.open(sdist) as archive:
    members = archive.getnames()
for part in ["tests/conftest.py", "docs/index.md", "LICENSE", "CHANGELOG.md"]:
    if not any(m.endswith("/" + part) for m in members):
        problems.append(f"the sdist lacks {part}")
for problem in problems:
    print(f"check_dist: {problem}", file=sys.stderr)
if problems:
    sys.exit(1)
print(
    f"check_dist: {wheel.name}: {len(names)} files, {len(lua)} Lua scripts, "
    f"{len(static)} dashboard files, no tests; {sdist.name}: tests and docs"
)

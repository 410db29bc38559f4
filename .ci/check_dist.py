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
lua = [n for n in names if n.startswith("celery_redqueue/lua/") and n.endswith(".lua")]
source_lua = list(Path("celery_redqueue/lua").glob("*.lua"))
problems = []
if len(lua) != len(source_lua):
    problems.append(f"the wheel has {len(lua)} Lua scripts, the source {len(source_lua)}")
for name in ["index.html", "app.js", "app.css"]:
    if f"celery_redqueue/ops/static/{name}" not in names:
        problems.append(f"the wheel lacks ops/static/{name}")
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
print(f"check_dist: {wheel.name}: {len(names)} files, {len(lua)} Lua scripts; {sdist.name} ok")
sys.exit(1 if problems else 0)

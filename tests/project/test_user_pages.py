"""User pages speak to users: no internal issue numbers (the docs site, the README, the
changelog it includes)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INTERNAL = re.compile(r"\b[Ii]ssues? \d+")


def test_no_user_page_names_an_internal_issue():
    pages = [*ROOT.joinpath("docs").rglob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"]
    pages += [*ROOT.joinpath("example_project").rglob("README.md"), ROOT / "bench" / "README.md"]
    found = [
        f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
        for page in pages
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if INTERNAL.search(line)
    ]
    assert found == [], "\n".join(found)

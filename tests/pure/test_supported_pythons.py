"""Every Python the package's classifiers list runs the fast tests in CI, and no other is listed:
the classifiers (setup.cfg), python_requires, and the Pythons of CI's nox sessions (noxfile.py)
plus the whole suite's (.ci/run runs ./run-tests on the machine's python3, 3.11) agree."""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHOLE_SUITE = "3.11"  # .ci/run's python3 (the machines' default interpreter)


def ci_session_pythons() -> set[str]:
    """The Python of each session in ``nox.options.sessions``: ``fast-3.12`` names its own, the
    others take their decorator's ``python=``."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    decorated: dict[str, str] = {}
    sessions: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call):
                    kw = {k.arg: k.value for k in deco.keywords}
                    name = kw["name"].value if "name" in kw else node.name
                    if isinstance(kw.get("python"), ast.Constant) and kw["python"].value:
                        decorated[name] = kw["python"].value
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "nox.options.sessions":
            sessions = [ast.literal_eval(e) for e in node.value.elts]
    assert sessions, "noxfile.py sets no nox.options.sessions list"
    found = set()
    for session in sessions:
        match = re.fullmatch(r"\w+-(3\.\d+)", session)
        found.add(match[1] if match else decorated[session])
    return found


def test_the_classifiers_list_exactly_the_pythons_ci_tests():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    listed = set(re.findall(r"Python :: (3\.\d+)$", config["metadata"]["classifiers"], re.M))
    assert listed == ci_session_pythons() | {WHOLE_SUITE}
    oldest = min(listed, key=lambda v: tuple(map(int, v.split("."))))
    assert config["options"]["python_requires"].strip() == f">={oldest}"

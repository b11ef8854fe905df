"""Every name in the README's guarantee table is a test or a spec check that exists."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from sessions.testing import checks

ROOT = Path(__file__).resolve().parents[2]


def _guarantee_rows() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Guarantees", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]


def _test_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
    return names


def test_every_name_in_the_guarantee_table_exists() -> None:
    rows = _guarantee_rows()
    assert len(rows) == 10
    tests, spec = _test_names(), {c.name for c in checks()}
    missing = []
    for row in rows:
        for token in re.findall(r"`([^`]+)`", row.rstrip(" |").rsplit("|", 1)[1]):
            if token.endswith((".py", "/")):
                found = any((ROOT / "tests").rglob(token.rstrip("/").rsplit("/", 1)[-1]))
            elif token.startswith("test_"):
                found = bool(fnmatch.filter(tests, token))
            else:
                found = token in spec
            if not found:
                missing.append(token)
    assert not missing, f"README guarantee table names what does not exist: {missing}"


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def test_every_yes_of_ours_in_the_catalogue_comparison_names_tests_that_exist() -> None:
    """The catalogue comparison's txsessions column: a "yes" names tests (unqualified
    names are in the file named last, else ``tests/contract/test_catalogue.py``), and
    each of them exists; a measured (not tested) row says so."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("How that compares, point by point", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    rows = rows[1:]  # the header
    assert len(rows) >= 15
    problems = []
    for row in rows:
        claim, ours = row.split(" | ")[0].lstrip("| "), row.split(" | ")[1]
        if "Measured, not tested" in ours:
            continue
        if not ours.startswith("yes"):
            problems.append(f"{claim}: says neither yes nor measured")
            continue
        current = ROOT / "tests" / "contract" / "test_catalogue.py"
        named = 0
        for token in re.findall(r"`([^`]+)`", ours):
            path, _, name = token.rpartition("::") if "::" in token else ("", "", token)
            if path or token.endswith(".py"):
                current = ROOT / (path or token)
                if not current.exists():
                    problems.append(f"{claim}: no file {path or token}")
                    continue
            if name.startswith("test_"):
                named += 1
                if name not in _functions(current):
                    problems.append(f"{claim}: no {name} in {current.relative_to(ROOT)}")
        if not named:
            problems.append(f"{claim}: says yes and names no test")
    assert not problems, problems

"""Every name in the README's guarantee table is a test or a spec check that exists."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from sessions.testing import checks

ROOT = Path(__file__).resolve().parent.parent


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

"""The soak's figures in the docs: written by the soak, never typed by hand.

``python -m tests.reliability.soak`` keeps its figures (JSON) in
``docs/generated/reliability.md`` and renders from them:

* ``docs/generated/reliability.md``: the table, every row naming the run (commit,
  command, date) that measured it; included in ``docs/RELIABILITY.md``;
* ``docs/generated/reliability-readme.md``: the summary included in ``README.md``.

A document includes a fragment between these markers, which this module rewrites::

    <!-- generated:NAME (python -m tests.reliability.soak; do not edit) -->
    ...
    <!-- /generated:NAME -->

``python -m tests.reliability.report`` re-renders fragments and documents from the
figures already measured (``--check``: change nothing, exit 1 if anything is stale);
``tests/reliability/test_report.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
GENERATED = REPO / "docs" / "generated"
TABLE = GENERATED / "reliability.md"
README_SUMMARY = GENERATED / "reliability-readme.md"
#: document -> the fragments it includes
DOCUMENTS = {"docs/RELIABILITY.md": ("reliability",), "README.md": ("reliability-readme",)}

_BEGIN = "<!-- generated:{name} (python -m tests.reliability.soak; do not edit) -->"
_END = "<!-- /generated:{name} -->"
_REGION = re.compile(
    r"<!-- generated:(?P<name>[a-z0-9-]+) \(python -m tests\.reliability\.soak; do not edit\) -->\n"
    r"(?P<body>.*?)<!-- /generated:(?P=name) -->",
    re.S,
)
_DATA = re.compile(r"<!-- soak-data (?P<data>\{.*?\}) -->", re.S)

#: Scenario order in the table.
ORDER = (
    "cancellation sweep",
    "SIGKILL mid-commit",
    "many writers",
    "concurrent pop",
    "fresh-database race",
    "pg_terminate_backend",
    "lost acknowledgement",
    "memory",
    "server restart",
)

Data = dict[str, dict[str, Any]]


def source() -> str:
    """The commit the working tree is at, and whether it has uncommitted changes
    (other than the files the soak writes itself)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit (no git)"
    ours = {"README.md", "docs/RELIABILITY.md", str(TABLE.relative_to(REPO))}
    ours.add(str(README_SUMMARY.relative_to(REPO)))
    dirty = [line for line in changed if line[3:] not in ours]
    return f"{commit} with uncommitted changes" if dirty else commit


def load() -> Data:
    """The figures measured so far (empty before the first soak)."""
    text = TABLE.read_text(encoding="utf-8") if TABLE.exists() else ""
    match = _DATA.search(text)
    return json.loads(match.group("data")) if match else {}


def _runs(data: Data) -> list[tuple[str, str, str]]:
    return sorted({(f["date"], f["source"], f["command"]) for f in data.values()})


def _order(data: Data) -> list[str]:
    def key(k: str) -> tuple[str, int]:
        scenario = data[k]["scenario"]
        return data[k]["backend"], ORDER.index(scenario) if scenario in ORDER else 99

    return sorted(data, key=key)


def render_table(data: Data) -> str:
    """``docs/generated/reliability.md``: every figure, and the runs that measured them."""
    runs = _runs(data)
    lines = ["Runs (the command, at the commit it ran on):", ""]
    for number, (date, commit, command) in enumerate(runs, 1):
        lines.append(f"{number}. `{command}` at commit `{commit}`, {date}")
    lines += [
        "",
        "| backend | scenario | tries | violations | duration | run | notes |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for key in _order(data):
        f = data[key]
        run = runs.index((f["date"], f["source"], f["command"])) + 1
        notes = "; ".join(
            f"{k}: {v:,}" if isinstance(v, int) else f"{k}: {v}" for k, v in f["notes"].items()
        )
        lines.append(
            f"| {f['backend']} | {f['scenario']} | {f['tries']:,} {f['unit']} | "
            f"{f['violations']} | {f['seconds']:,} s | {run} | {notes} |"
        )
    examples = [(k, e) for k in _order(data) for e in data[k].get("examples", [])]
    if examples:
        lines += ["", "Violations seen (the first few per scenario):", ""]
        lines += [f"- {k}: {json.dumps(e[:300], ensure_ascii=False)}" for k, e in examples]
    # "--" may not appear inside an HTML comment; a JSON escape keeps the value exact.
    blob = json.dumps(data, ensure_ascii=False).replace("--", "-\\u002d")
    lines += ["", f"<!-- soak-data {blob} -->", ""]
    return "\n".join(lines)


def _sum(data: Data, scenario: str, field: str = "tries", backend: str | None = None) -> int:
    total = 0
    for f in data.values():
        if f["scenario"] == scenario and backend in (None, f["backend"]):
            value = f["tries"] if field == "tries" else f["notes"].get(field, 0)
            total += int(value)
    return total


def _pair(data: Data, scenario: str) -> str:
    sqlite, postgres = (_sum(data, scenario, backend=b) for b in ("sqlite", "postgres"))
    return f"{sqlite:,} (SQLite) + {postgres:,} (PostgreSQL)"


def render_readme(data: Data) -> str:
    """The README's summary of the soak."""
    if not data:
        return "No soak has been run on this code yet: `python -m tests.reliability.soak --full`.\n"
    parts = []
    if _sum(data, "cancellation sweep"):
        parts.append(
            f"{_pair(data, 'cancellation sweep')} cancellations and timeouts of running "
            f"operations ({_sum(data, 'cancellation sweep', 'commit in flight'):,} of them "
            "while a commit's database call was in flight)"
        )
    if _sum(data, "SIGKILL mid-commit"):
        parts.append(
            f"{_pair(data, 'SIGKILL mid-commit')} SIGKILLs of committing processes "
            f"({_sum(data, 'SIGKILL mid-commit', 'kills in commit()'):,} inside `commit()`)"
        )
    if _sum(data, "pg_terminate_backend"):
        parts.append(
            f"{_sum(data, 'pg_terminate_backend'):,} PostgreSQL commit attempts cut by "
            "`pg_terminate_backend` while in flight"
        )
    if _sum(data, "server restart"):
        parts.append(f"{_sum(data, 'server restart'):,} commits across a PostgreSQL restart")
    if _sum(data, "memory"):
        parts.append(f"{_pair(data, 'memory')} `Runner` turns watching memory")
    violations = sum(int(f["violations"]) for f in data.values())
    runs = "; ".join(
        f"`{command}` at commit `{commit}` ({date})" for date, commit, command in _runs(data)
    )
    return (
        f"Latest soak: {violations} violation{'' if violations == 1 else 's'} in "
        + ", ".join(parts)
        + f". Measured by {runs}; "
        "every figure in [docs/RELIABILITY.md](docs/RELIABILITY.md#latest-soak-figures).\n"
    )


FRAGMENTS: dict[str, tuple[Path, Callable[[Data], str]]] = {
    "reliability": (TABLE, render_table),
    "reliability-readme": (README_SUMMARY, render_readme),
}


def regions(text: str) -> dict[str, str]:
    """``name -> body`` of every soak region in ``text``."""
    return {m.group("name"): m.group("body") for m in _REGION.finditer(text)}


def _splice(text: str, fragments: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        body = fragments.get(name, match.group("body"))
        return f"{_BEGIN.format(name=name)}\n{body}{_END.format(name=name)}"

    return _REGION.sub(replace, text)


def plan(data: Data) -> dict[Path, str]:
    """``path -> content`` of every fragment and every document that includes one."""
    fragments = {name: render(data) for name, (_, render) in FRAGMENTS.items()}
    wanted = {path: fragments[name] for name, (path, _) in FRAGMENTS.items()}
    for document in DOCUMENTS:
        path = REPO / document
        wanted[path] = _splice(path.read_text(encoding="utf-8"), fragments)
    return wanted


def problems() -> list[str]:
    """What is stale: a fragment not what the figures say, a document whose region
    differs from its fragment, a region missing (empty when all is in order)."""
    found = []
    data = load()
    for path, text in plan(data).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            found.append(f"{path.relative_to(REPO)} is not what the soak figures say")
    for document, names in DOCUMENTS.items():
        present = regions((REPO / document).read_text(encoding="utf-8"))
        found += [f"{document} has no region {name!r}" for name in names if name not in present]
    return found


def write(data: Data) -> list[str]:
    """Write ``data`` as the figures and bring every fragment and document up to date."""
    GENERATED.mkdir(parents=True, exist_ok=True)
    changed = []
    for path, text in plan(data).items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(str(path.relative_to(REPO)))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.report", description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    for path in write(load()):
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

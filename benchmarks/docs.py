"""Write the measured figures into the docs: nothing in them is typed by hand.

``python -m benchmarks.docs`` renders Markdown fragments from the committed results
(``benchmarks/results/*.json``) into ``docs/generated/<name>.md`` and copies each into
every document that has its markers::

    <!-- generated:NAME (python -m benchmarks.docs; do not edit) -->
    ...
    <!-- /generated:NAME -->

``python -m benchmarks.docs --check`` changes nothing and exits 1 when a fragment or a
document is not what the results say (``tests/docs/test_generated_docs.py`` runs the same
check). Full benchmark runs call this at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from . import _report
from ._report import _fmt, _get, _ratio

Result = dict[str, Any]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
GENERATED = os.path.join(ROOT, "docs", "generated")
DOCUMENTS = (
    "README.md",
    "docs/benchmarks.md",
    "docs/postgres.md",
    "docs/RELIABILITY.md",
    "docs/history.md",
    "docs/catalogue.md",
    "docs/cli.md",
)

_BEGIN = "<!-- generated:{name} (python -m benchmarks.docs; do not edit) -->"
_END = "<!-- /generated:{name} -->"
# A fragment that ends with a newline fills lines of its own; one that does not (e.g. a
# table cell) is spliced inline, between its markers on one line.
_REGION = re.compile(
    r"<!-- generated:(?P<name>[a-z0-9-]+) \(python -m benchmarks\.docs; do not edit\) -->\n?"
    r"(?P<body>.*?)"
    r"<!-- /generated:(?P=name) -->",
    re.S,
)


def _x(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}x"


def _load(name: str) -> Result | None:
    path = os.path.join(RESULTS, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        loaded: Result = json.load(fh)
    return loaded


# ----------------------------------------------------------------------------- fragments


def _run_line(results: Result, *, ratios: bool = True) -> str:
    meta = results["meta"]
    m = meta["machine"]
    load = m.get("loadavg_start")
    end = meta.get("loadavg_end")
    line = (
        f"Latest full run: {m['date']}. {_report.source_line(meta)} Machine (detected): "
        f"{m.get('cores')} CPU cores ({m['cpu']}), {m['ram_gb']} GB RAM; load average at "
        f"start {load}"
    )
    line += f", at end {end}." if end else "."
    cores = m.get("cores") or 1
    if end and max(end) > cores / 2:
        line += (
            " The machine was busy during the run (other work shared its cores); "
            "read the ratios with that in mind."
        )
    if ratios:
        line += " Ratios are ours ÷ theirs, medians of interleaved rounds in one process."
    return line


def summary(results: Result) -> str:
    """The README's speed table."""

    def tps(workload: str, backend: str, key: str) -> Any:
        return _get(results, workload, backend, key, "turns_per_s")

    def vs(workload: str, backend: str, key: str) -> str:
        ours = _report.OURS[backend]
        return _x(_ratio(tps(workload, backend, ours), tps(workload, backend, key)))

    def conc(backend: str) -> str:
        level, _ = _report._level(results, backend)
        if level is None:
            return "not measured"
        ours = _report.OURS[backend]
        cell = _get(results, "concurrency", backend, ours, "levels", str(level)) or {}

        def r(key: str) -> str:
            return _x(_ratio(cell.get("turns_per_s"), _report._conc(results, backend, key, level)))

        per_tx = _ratio(cell.get("batches"), cell.get("transactions"))
        text = f"{_fmt(cell.get('turns_per_s'))} turns/s at {level} sessions"
        if per_tx is not None:
            text += f", {per_tx:.1f} commits per transaction"
        if backend == "sqlite":
            text += f": {r('raw_sqlite3')} raw sqlite3, {r('sdk_sqlite')} `SQLiteSession`"
        else:
            text += (
                f": {r('raw_asyncpg')} the raw one-statement floor, "
                f"{r('sdk_sqlalchemy_pg')} `SQLAlchemySession` (same pool)"
            )
        return text + f"; {cell.get('errors', '–')} failed commits"

    def reads(backend: str) -> str:
        sizes = _get(results, "history", backend, _report.OURS[backend], "sizes") or {}
        if not sizes:
            return "not measured"
        small, big = min(sizes, key=int), max(sizes, key=int)
        ratio = _ratio(sizes[big]["limit20_ms"], sizes[small]["limit20_ms"])
        return f"{_x(ratio)} ({int(big):,} vs {int(small):,} items)"

    def memory(backend: str) -> str:
        mem = _get(results, "memory", backend) or {}
        if "rss_growth_mb" not in mem:
            return "not measured"
        return (
            f"+{mem['rss_growth_mb']:.2f} MB RSS over {mem['turns']:,} turns; "
            f"{mem['agent']['agents_alive']} of {mem['agent']['runs']} Agents alive after "
            "`Runner.run`"
        )

    a, b = "commit_per_turn", "buffered_run"
    rows = [
        [
            "commit per turn, one session, vs a floor writing our rows "
            f"({_report.same_work_rows(results).replace(' and ', ', ')}) in one transaction",
            f"{vs(a, 'sqlite', 'raw_aiosqlite_1hop_same')} the one-thread-hop aiosqlite floor "
            "(the limit for a design that keeps the event loop free); "
            f"{vs(a, 'sqlite', 'raw_sqlite3_same')} raw `sqlite3` blocking the event loop",
            f"{vs(a, 'postgres', 'raw_asyncpg_same')} one raw statement",
        ],
        [
            "the same vs bare floors (4 item rows into one table)",
            f"{vs(a, 'sqlite', 'raw_aiosqlite_1hop')} one-hop aiosqlite; "
            f"{vs(a, 'sqlite', 'raw_sqlite3')} raw `sqlite3`",
            f"{vs(a, 'postgres', 'raw_asyncpg')} one raw `INSERT … unnest`",
        ],
        [
            "commit per turn vs the SDK's sessions (one transaction per turn each)",
            f"{vs(a, 'sqlite', 'sdk_sqlite')} `SQLiteSession`, "
            f"{vs(a, 'sqlite', 'sdk_async_sqlite')} `AsyncSQLiteSession`, "
            f"{vs(a, 'sqlite', 'sdk_sqlalchemy_sqlite')} `SQLAlchemySession`",
            f"{vs(a, 'postgres', 'sdk_sqlalchemy_pg')} `SQLAlchemySession`",
        ],
        [
            "5-turn tool run: ours commits once (1 WAL flush), the SDK writes each turn "
            "(5 flushes)",
            f"{vs(b, 'sqlite', 'sdk_sqlite')} `SQLiteSession`, "
            f"{vs(b, 'sqlite', 'sdk_sqlalchemy_sqlite')} `SQLAlchemySession`",
            f"{vs(b, 'postgres', 'sdk_sqlalchemy_pg')} `SQLAlchemySession`",
        ],
        [
            "many sessions at once, commit per turn (ours: group commit; the others: one "
            "transaction per commit)",
            conc("sqlite"),
            conc("postgres"),
        ],
        ["`get_items(limit=20)`, longest vs shortest history", reads("sqlite"), reads("postgres")],
        ["memory", memory("sqlite"), memory("postgres")],
    ]
    lines = [_run_line(results), ""]
    lines += _report._table(["workload", "SQLite", "PostgreSQL"], rows)
    targets = _report.check_targets(results)
    measured = [t for t in targets if t["met"] is not None]
    missed = [t for t in measured if not t["met"]]
    lines += ["", f"Targets: {len(measured) - len(missed)} of {len(measured)} met."]
    if missed:
        lines[-1] += " Missed: " + "; ".join(
            f"{t['target']} ({_fmt(t['measured'], 2)}, required {t['required']}"
            + (f"; out of reach: {t['out_of_reach']}" if t.get("out_of_reach") else "")
            + ")"
            for t in missed
        )
        lines[-1] += "."
    return "\n".join(lines) + "\n"


def results_section(results: Result) -> str:
    """docs/benchmarks.md: the whole latest run (header, durability, targets, tables)."""
    lines = _report.header(results) + [""] + _report.body(results, "###")
    return "\n".join(lines).rstrip("\n") + "\n"


def postgres_section(results: Result) -> str:
    """docs/postgres.md: the PostgreSQL rows of the latest run."""

    def tps(workload: str, key: str) -> Any:
        return _get(results, workload, "postgres", key, "turns_per_s")

    level, _ = _report._level(results, "postgres")
    rows = []
    for key, what in (
        ("ours_pg", "`add_items(4 items)` + `commit()`"),
        ("raw_asyncpg_same", "raw asyncpg, our rows in one statement (same work, no core)"),
        ("raw_asyncpg", "raw asyncpg, one `INSERT … unnest` of 4 item rows (bare)"),
        ("sdk_sqlalchemy_pg", "the SDK's `SQLAlchemySession`"),
    ):
        cell = _get(results, "concurrency", "postgres", key, "levels", str(level)) or {}
        rows.append(
            [
                what,
                _fmt(tps("commit_per_turn", key)),
                _fmt(cell.get("turns_per_s")) if level is not None else "–",
            ]
        )
    ours = _get(results, "concurrency", "postgres", "ours_pg", "levels", str(level)) or {}
    per_tx = _ratio(ours.get("batches"), ours.get("transactions"))
    lines = [_run_line(results, ratios=False) + " Medians of interleaved rounds.", ""]
    lines += _report._table(
        ["per turn (4 items), durable", "turns/s, one session", f"turns/s, {level} sessions"],
        rows,
    )
    if per_tx is not None:
        lines += [
            "",
            f"At {level} sessions our commits shared a transaction {per_tx:.1f} at a time.",
        ]
    return "\n".join(lines) + "\n"


def failover_summary(failover: Result) -> str:
    """README: the failover figures in one sentence."""
    rounds = failover["rounds"]
    by_mode: dict[str, list[Result]] = {}
    for r in rounds:
        by_mode.setdefault(r["mode"], []).append(r)
    parts = []
    for mode, name in (("sync", "synchronous"), ("async", "asynchronous")):
        found = by_mode.get(mode)
        if not found:
            continue
        acked = sum(r["acknowledged"] for r in found)
        lost = sum(r["lost"] for r in found)
        dup = sum(r["duplicated"] + r["torn"] for r in found)
        parts.append(
            f"{len(found)} with {name} replication: {lost} of {acked:,} acknowledged "
            f"commits lost, {dup} duplicated or torn"
        )
    return (
        f"Failover (a PostgreSQL primary SIGKILLed under load, its standby promoted, "
        f"{len(rounds)} times): "
        + "; ".join(parts)
        + "; figures and the command in [docs/RELIABILITY.md](docs/RELIABILITY.md#failover).\n"
    )


def peers_section(results: Result) -> str:
    """README: workload (g), ours and the peers, from the latest full run."""
    if not results.get("peers"):
        return (
            "The latest full run did not measure the peers: run `python -m benchmarks` "
            "with the `bench-peers` extra installed.\n"
        )
    lines = [_run_line(results), ""]
    lines += _report.peers_tables(results, "###", durability=False)[2:]
    if os.path.exists(os.path.join(RESULTS, _report.PEERS_PLOT)):
        lines += [f"![ours and the peers](benchmarks/results/{_report.PEERS_PLOT})", ""]
    targets = _report.peer_targets(results)
    measured = [t for t in targets if t["met"] is not None]
    behind = [t for t in measured if not t["met"]]
    line = f"Ours ahead on {len(measured) - len(behind)} of {len(measured)} peer rows measured"
    if behind:
        line += ". Behind: " + "; ".join(
            f"{t['target'].removeprefix('ours ahead of ')} ({_fmt(t['measured'], 2)}x)"
            for t in behind
        )
    lines.append(line + ".")
    return "\n".join(lines).rstrip("\n") + "\n"


#: fragment name -> (loader of its results, renderer)
FRAGMENTS: dict[str, tuple[Callable[[], Result | None], Callable[[Result], str]]] = {
    "benchmarks-summary": (lambda: _load("latest.json"), summary),
    "benchmarks-results": (lambda: _load("latest.json"), results_section),
    "benchmarks-postgres": (lambda: _load("latest.json"), postgres_section),
    "benchmarks-peers": (lambda: _load("latest.json"), peers_section),
}

#: what a registered fragment says before its command has committed any results
_NOT_YET = "No results committed yet: `{command}` writes them.\n"


def register(name: str, results_file: str, renderer: Callable[[Result], str], command: str) -> None:
    """Add a fragment rendered from ``benchmarks/results/<results_file>``, which
    ``command`` writes (until it has, the fragment says so)."""

    def load() -> Result:
        return _load(results_file) or {"not yet": command}

    def render(results: Result) -> str:
        if "not yet" in results:
            return _NOT_YET.format(command=results["not yet"])
        return renderer(results)

    FRAGMENTS[name] = (load, render)


def _results_markdown(name: str) -> Callable[[Result], str]:
    """A renderer that includes ``benchmarks/results/<name>``, the table the command
    wrote beside its JSON (its title line dropped)."""

    def renderer(_results: Result) -> str:
        with open(os.path.join(RESULTS, name), encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        while lines and (lines[0].startswith("# ") or not lines[0].strip()):
            lines.pop(0)
        return "\n".join(lines) + "\n"

    return renderer


register(
    "integrity",
    "integrity.json",
    _results_markdown("integrity.md"),
    "python -m benchmarks.integrity",
)
register(
    "handoff",
    "handoff.json",
    _results_markdown("handoff.md"),
    "python -m benchmarks.handoff",
)


def render() -> dict[str, str]:
    """Every fragment whose results are committed."""
    _register_others()
    out: dict[str, str] = {}
    for name, (loader, renderer) in FRAGMENTS.items():
        results = loader()
        if results is not None:
            out[name] = renderer(results)
    return out


def _register_others() -> None:
    """Fragments of the other commands (failover, scale, catalogue, doctor), if they
    exist here."""
    for module in ("failover", "scale", "catalogue", "doctor"):
        try:
            __import__(f"benchmarks.{module}")
        except ImportError:
            continue


# ----------------------------------------------------------------------------- documents


def regions(text: str) -> dict[str, str]:
    """``name -> body`` of every generated region in ``text``."""
    return {m.group("name"): m.group("body") for m in _REGION.finditer(text)}


def strip_regions(text: str) -> str:
    """``text`` without its generated regions (what was typed by hand)."""
    return _REGION.sub("", text)


def splice(text: str, fragments: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        body = fragments.get(name, match.group("body"))
        newline = "\n" if body.endswith("\n") else ""
        return f"{_BEGIN.format(name=name)}{newline}{body}{_END.format(name=name)}"

    return _REGION.sub(replace, text)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def plan() -> dict[str, str]:
    """``path -> wanted content`` for every generated file and document."""
    fragments = render()
    wanted = {os.path.join(GENERATED, f"{name}.md"): text for name, text in fragments.items()}
    for document in DOCUMENTS:
        path = os.path.join(ROOT, document)
        text = _read(path)
        if text is not None and regions(text):
            wanted[path] = splice(text, fragments)
    return wanted


def problems() -> list[str]:
    """What differs from what the results say (empty when everything is in order)."""
    found: list[str] = []
    fragments = render()
    for path, text in plan().items():
        if _read(path) != text:
            found.append(f"{os.path.relpath(path, ROOT)} differs from what the results say")
    for document in DOCUMENTS:
        text = _read(os.path.join(ROOT, document)) or ""
        for name in regions(text):
            if name not in fragments:
                found.append(f"{document}: no results for the generated region {name!r}")
    return found


def write() -> list[str]:
    """Bring every generated file and document up to date; the paths changed."""
    os.makedirs(GENERATED, exist_ok=True)
    changed = []
    for path, text in plan().items():
        if _read(path) != text:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            changed.append(os.path.relpath(path, ROOT))
    return changed


def update(out: Callable[[str], None]) -> None:
    """:func:`write`, saying what changed (what a measuring command calls at its end)."""
    for path in write():
        out(f"updated {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.docs", description=__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    for path in write():
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    # Run as the package module, where the other commands register their fragments.
    from benchmarks import docs as _package_docs

    raise SystemExit(_package_docs.main())

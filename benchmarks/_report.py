"""Results -> target check, markdown tables and PNG plots."""

from __future__ import annotations

import math
import os
from typing import Any

Result = dict[str, Any]

OURS = {"sqlite": "ours_sqlite", "postgres": "ours_pg"}
BACKEND_TITLE = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def _get(d: Any, *path: Any) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return None
    if math.isnan(a) or math.isnan(b):
        return None
    return float(a) / float(b)


def _fmt(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{digits}f}"
    return str(x)


def _x(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}x"


# ----------------------------------------------------------------------------- targets


def check_targets(results: Result) -> list[Result]:
    """Each target: name, measured, required, met (None when not measured), note."""
    out: list[Result] = []

    def at_least(
        name: str, measured: float | None, required: float, note: str = "", ceiling: str = ""
    ) -> None:
        met = None if measured is None else measured >= required
        gap = "" if measured is None or met else f"missed by {(1 - measured / required) * 100:.0f}%"
        out.append(
            {
                "target": name,
                "measured": None if measured is None else round(measured, 3),
                "required": f">= {required}",
                "met": met,
                "gap": gap,
                "note": note,
                "ceiling": ceiling,
            }
        )

    def ceiling(*pairs: tuple[str, float | None]) -> str:
        return "; ".join(f"{name} {_x(r)}" for name, r in pairs if r is not None)

    def at_most(name: str, measured: float | None, required: float, note: str = "") -> None:
        met = None if measured is None else measured <= required
        gap = "" if measured is None or met else f"missed by {(measured / required - 1) * 100:.0f}%"
        out.append(
            {
                "target": name,
                "measured": None if measured is None else round(measured, 3),
                "required": f"<= {required}",
                "met": met,
                "gap": gap,
                "note": note,
                "ceiling": "",
            }
        )

    cpt = results.get("commit_per_turn", {})

    def tps(backend: str, key: str) -> Any:
        return _get(cpt, backend, key, "turns_per_s")

    one_hop = _ratio(tps("sqlite", "ours_sqlite"), tps("sqlite", "raw_aiosqlite_1hop"))
    at_least(
        "SQLite commit-per-turn vs raw sqlite3 floor",
        _ratio(tps("sqlite", "ours_sqlite"), tps("sqlite", "raw_sqlite3")),
        0.85,
        "" if one_hop is None else f"vs the 1-hop aiosqlite floor: {one_hop:.2f}x",
    )
    at_least(
        "SQLite commit-per-turn vs SDK SQLiteSession",
        _ratio(tps("sqlite", "ours_sqlite"), tps("sqlite", "sdk_sqlite")),
        1.5,
        ceiling=ceiling(
            ("raw sqlite3", _ratio(tps("sqlite", "raw_sqlite3"), tps("sqlite", "sdk_sqlite"))),
            (
                "1-hop aiosqlite",
                _ratio(tps("sqlite", "raw_aiosqlite_1hop"), tps("sqlite", "sdk_sqlite")),
            ),
        ),
    )
    at_least(
        "PostgreSQL commit-per-turn vs raw asyncpg floor",
        _ratio(tps("postgres", "ours_pg"), tps("postgres", "raw_asyncpg")),
        0.9,
    )
    at_least(
        "PostgreSQL commit-per-turn vs SQLAlchemySession/asyncpg",
        _ratio(tps("postgres", "ours_pg"), tps("postgres", "sdk_sqlalchemy_pg")),
        5.0,
        ceiling=ceiling(
            (
                "raw asyncpg",
                _ratio(tps("postgres", "raw_asyncpg"), tps("postgres", "sdk_sqlalchemy_pg")),
            )
        ),
    )
    conc = _get(results, "concurrency", "postgres") or {}
    levels = sorted(int(k) for k in (_get(conc, "ours_pg", "levels") or {}))
    level = 100 if 100 in levels else (max([n for n in levels if n <= 100], default=None))
    note = "" if level == 100 or level is None else f"measured at concurrency {level} (quick run)"
    ours_l = _get(conc, "ours_pg", "levels", str(level)) or {}
    sqla_l = _get(conc, "sdk_sqlalchemy_pg", "levels", str(level)) or {}
    raw_l = _get(conc, "raw_asyncpg", "levels", str(level)) or {}
    at_least(
        "PostgreSQL concurrency 100 vs SQLAlchemySession (same pool)",
        _ratio(ours_l.get("turns_per_s"), sqla_l.get("turns_per_s")),
        5.0,
        note,
        ceiling(("raw asyncpg", _ratio(raw_l.get("turns_per_s"), sqla_l.get("turns_per_s")))),
    )
    errors = ours_l.get("errors")
    at_most(
        "PostgreSQL concurrency 100: errors (ours)",
        None if errors is None else float(errors),
        0.0,
        note,
    )
    for backend in ("sqlite", "postgres"):
        sizes = _get(results, "history", backend, OURS[backend], "sizes") or {}
        if sizes:
            small, big = min(sizes, key=int), max(sizes, key=int)
            measured = _ratio(sizes[big]["limit20_ms"], sizes[small]["limit20_ms"])
            note = f"{big} vs {small} items"
        else:
            measured, note = None, ""
        at_most(
            f"{BACKEND_TITLE[backend]} get_items(limit=20): largest / smallest history",
            measured,
            1.5,
            note,
        )
    for backend in ("sqlite", "postgres"):
        mem = _get(results, "memory", backend) or {}
        turns = mem.get("turns")
        note = f"over {turns} turns" if turns else ""
        at_most(f"{BACKEND_TITLE[backend]} RSS growth (MB)", mem.get("rss_growth_mb"), 5.0, note)
        at_most(
            f"{BACKEND_TITLE[backend]} tracemalloc growth (MB)",
            mem.get("traced_growth_mb"),
            5.0,
            note,
        )
        alive = _get(mem, "agent", "agents_alive")
        at_most(
            f"{BACKEND_TITLE[backend]} Agents retained after Runner.run",
            None if alive is None else float(alive),
            0.0,
            f"{_get(mem, 'agent', 'runs')} runs" if alive is not None else "",
        )
    return out


# ----------------------------------------------------------------------------- markdown


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(results: Result) -> str:
    meta = results["meta"]
    m = meta["machine"]
    lines = [
        f"# txsessions benchmarks{' (QUICK run: tiny sizes, not meaningful)' if meta['quick'] else ''}",
        "",
        f"- Date: {m['date']}; took {meta.get('seconds', 0):.0f} s; command: `{meta['command']}`",
        f"- Machine: {m['cores']} cores ({m['cpu']}), {m['ram_gb']} GB RAM, {m['os']}; "
        f"load average at start {m['loadavg_start']}, at end {meta.get('loadavg_end')}",
        "- Noise: a small shared machine (2 cores) on which other jobs (test suites) were "
        "running at the same time; figures are medians of rounds with subjects interleaved, "
        "and the ratios (same process, same data, same moment) are what matter.",
        f"- Versions: Python {m['python']}, SQLite {m['sqlite']}, PostgreSQL server "
        f"{meta.get('postgres_server') or '–'}, openai-agents {m['openai-agents']}, "
        f"txsessions {m['txsessions']}, aiosqlite {m['aiosqlite']}, asyncpg {m['asyncpg']}, "
        f"SQLAlchemy {m['sqlalchemy']}",
        f"- Items: 4 per turn (user message, function_call, function_call_output, assistant "
        f"message), {meta['item_bytes']:.0f} bytes of JSON each on average. Durability: "
        "SQLite WAL + synchronous=FULL everywhere; PostgreSQL synchronous_commit="
        f"{meta.get('postgres_synchronous_commit') or '–'}. PostgreSQL pool: "
        f"{meta['pool']} connections for every PostgreSQL subject in (c); 2 in the "
        "single-session workloads.",
    ]
    for note in meta.get("notes", []):
        lines.append(f"- Note: {note}")
    lines.append("")

    targets = results.get("targets", [])
    if targets:
        lines += ["## Targets", ""]
        rows = []
        for t in targets:
            status = "not measured" if t["met"] is None else ("met" if t["met"] else "**MISSED**")
            rows.append(
                [
                    t["target"],
                    _fmt(t["measured"], 2),
                    t["required"],
                    status,
                    t["gap"],
                    t.get("ceiling", ""),
                    t["note"],
                ]
            )
        lines += _table(
            ["target", "measured", "required", "status", "gap", "ceiling: floor ÷ anchor", "note"],
            rows,
        )
        lines += [
            "",
            "The ceiling column is what the raw-driver floor itself reaches against the "
            "anchor in this same run: no implementation doing the same durable work can "
            "beat it, so a ratio target above the ceiling cannot be met on this machine.",
            "",
        ]

    for backend in ("sqlite", "postgres"):
        ours = OURS[backend]
        title = BACKEND_TITLE[backend]
        cpt = _get(results, "commit_per_turn", backend)
        if cpt:
            lines += [f"## (a) {title}: one session, commit per turn", ""]
            base = _get(cpt, ours, "turns_per_s")
            rows = [
                [
                    e["label"],
                    e["kind"],
                    _fmt(e["turns_per_s"]),
                    _fmt(e["p50_ms"], 2),
                    _fmt(e["p99_ms"], 2),
                    _x(_ratio(base, e["turns_per_s"])),
                ]
                for e in cpt.values()
            ]
            lines += _table(["subject", "kind", "turns/s", "p50 ms", "p99 ms", "ours ÷ this"], rows)
            lines.append("")
        run = _get(results, "buffered_run", backend)
        if run:
            lines += [
                f"## (b) {title}: 5-turn tool run (ours: staged, one commit; SDK: a write per "
                "turn; floors: one transaction)",
                "",
            ]
            base = _get(run, ours, "runs_per_s")
            rows = [
                [
                    e["label"],
                    e["kind"],
                    _fmt(e["runs_per_s"]),
                    _fmt(e["turns_per_s"]),
                    _x(_ratio(base, e["runs_per_s"])),
                ]
                for e in run.values()
            ]
            lines += _table(["subject", "kind", "runs/s", "turns/s", "ours ÷ this"], rows)
            lines.append("")
        conc = _get(results, "concurrency", backend)
        if conc:
            levels = sorted({int(n) for e in conc.values() for n in e["levels"]})
            lines += [
                f"## (c) {title}: many sessions at once (turns/s, errors; commit per turn)",
                "",
            ]
            rows = []
            for e in conc.values():
                row = [e["label"]]
                for n in levels:
                    cell = e["levels"].get(str(n), {})
                    if "error" in cell:
                        row.append("failed to open")
                        continue
                    if "skipped" in cell:
                        row.append("skipped: too slow")
                        continue
                    text = _fmt(cell.get("turns_per_s"))
                    if cell.get("errors"):
                        text += f" ({cell['errors']} err)"
                    if cell.get("timed_out"):
                        text += " (timed out)"
                    row.append(text)
                for n in levels:
                    row.append(
                        _x(
                            _ratio(
                                _get(conc, ours, "levels", str(n), "turns_per_s"),
                                _get(e, "levels", str(n), "turns_per_s"),
                            )
                        )
                    )
                rows.append(row)
            header = (
                ["subject"] + [f"x{n}" for n in levels] + [f"ours ÷ this @x{n}" for n in levels]
            )
            lines += _table(header, rows)
            lines.append("")
            for e in conc.values():
                for n, cell in e["levels"].items():
                    if cell.get("error_kinds"):
                        first = next(iter(cell["error_kinds"].items()))
                        lines.append(
                            f"- {e['label']} x{n}: {cell['errors']} errors, e.g. "
                            f"{first[1]}x `{first[0][:140]}`"
                        )
                    if cell.get("skipped"):
                        lines.append(f"- {e['label']} x{n} skipped: {cell['skipped']}")
            lines.append("")
        for part, what, unit in (
            ("history", "history length (items in the session)", "items"),
            (
                "sessions",
                "number of sessions in the database (reading a 20-item session)",
                "sessions",
            ),
        ):
            data = _get(results, part, backend)
            if not data:
                continue
            sizes = sorted({int(n) for e in data.values() for n in e["sizes"]})
            lines += [f"## (d) {title}: read latency (median ms) vs {what}", ""]
            rows = []
            for e in data.values():
                row = [e["label"]]
                row += [_fmt(_get(e, "sizes", str(n), "limit20_ms"), 3) for n in sizes]
                row += [_fmt(_get(e, "sizes", str(n), "full_ms"), 2) for n in sizes]
                rows.append(row)
            header = (
                ["subject"]
                + [f"limit=20 @{n:,} {unit}" for n in sizes]
                + [f"full @{n:,} {unit}" for n in sizes]
            )
            lines += _table(header, rows)
            lines.append("")

    mem = results.get("memory")
    if mem:
        lines += [
            "## (e) Memory (fresh process; each turn: new session object, read 20, add 4, commit)",
            "",
        ]
        rows = []
        for backend, e in mem.items():
            if "error" in e:
                rows.append(
                    [BACKEND_TITLE.get(backend, backend), "error: " + e["error"][:100]] + ["–"] * 5
                )
                continue
            rows.append(
                [
                    BACKEND_TITLE.get(backend, backend),
                    f"{e['turns']:,} after {e['warmup']:,}",
                    _fmt(e["rss_growth_mb"], 2),
                    _fmt(e["traced_growth_mb"], 3),
                    _fmt(e["traced_peak_mb"], 2),
                    f"{e['agent']['agents_alive']} of {e['agent']['runs']}",
                    _fmt(e["turns_per_s_untraced"]),
                ]
            )
        lines += _table(
            [
                "backend",
                "turns",
                "RSS growth MB",
                "tracemalloc growth MB",
                "traced peak MB",
                "Agents alive after Runner.run",
                "turns/s",
            ],
            rows,
        )
        lines.append("")
    for failure in results.get("failures", []):
        lines.append(f"- could not measure: {failure}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- plots


def plots(results: Result, directory: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    written: list[str] = []
    backends = [b for b in ("sqlite", "postgres") if _get(results, "concurrency", b)]
    if backends:
        fig, axes = plt.subplots(
            1, len(backends), figsize=(6.5 * len(backends), 4.5), squeeze=False
        )
        for ax, backend in zip(axes[0], backends, strict=True):
            for key, e in results["concurrency"][backend].items():
                pts = sorted(
                    (int(n), c["turns_per_s"]) for n, c in e["levels"].items() if "turns_per_s" in c
                )
                if not pts:
                    continue
                style = "-o" if e["kind"] == "ours" else ("--s" if e["kind"] == "floor" else ":^")
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    style,
                    label=e["label"],
                    linewidth=2 if e["kind"] == "ours" else 1.2,
                )
                del key
            ax.set_xscale("log")
            ax.set_yscale("log")
            levels = sorted(
                {int(n) for e in results["concurrency"][backend].values() for n in e["levels"]}
            )
            ax.set_xticks(levels, [str(n) for n in levels])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel("concurrent sessions")
            ax.set_ylabel("committed turns / s")
            ax.set_title(f"{BACKEND_TITLE[backend]}: throughput vs concurrency")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(directory, "throughput_vs_concurrency.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for part, xlabel, name in (
        ("history", "items in the session", "read_latency_vs_history.png"),
        ("sessions", "sessions in the database", "read_latency_vs_sessions.png"),
    ):
        backends = [b for b in ("sqlite", "postgres") if _get(results, part, b)]
        if not backends:
            continue
        fig, axes = plt.subplots(
            1, len(backends), figsize=(6.5 * len(backends), 4.5), squeeze=False
        )
        for ax, backend in zip(axes[0], backends, strict=True):
            colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
            for i, e in enumerate(results[part][backend].values()):
                pts = sorted((int(n), v) for n, v in e["sizes"].items())
                xs = [p[0] for p in pts]
                color = colors[i % len(colors)]
                width = 2 if e["kind"] == "ours" else 1.2
                ax.plot(
                    xs,
                    [p[1]["limit20_ms"] for p in pts],
                    "-o",
                    color=color,
                    linewidth=width,
                    label=f"{e['label']} limit=20",
                )
                ax.plot(
                    xs,
                    [p[1]["full_ms"] for p in pts],
                    "--",
                    color=color,
                    linewidth=width,
                    alpha=0.6,
                    label=f"{e['label']} full",
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("get_items latency, ms (median)")
            ax.set_title(f"{BACKEND_TITLE[backend]}: read latency")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = os.path.join(directory, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written

"""Results -> target check, markdown tables and PNG plots."""

from __future__ import annotations

import json
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


def _tps(results: Result, workload: str, backend: str, key: str) -> Any:
    return _get(results, workload, backend, key, "turns_per_s")


def _level(results: Result, backend: str, want: int = 100) -> tuple[int | None, str]:
    """The concurrency level closest to ``want`` (quick runs stop lower), and a note."""
    levels = sorted(
        int(k) for k in (_get(results, "concurrency", backend, OURS[backend], "levels") or {})
    )
    level = want if want in levels else max([n for n in levels if n <= want], default=None)
    note = "" if level in (want, None) else f"measured at {level} sessions (quick run)"
    return level, note


def _conc(results: Result, backend: str, key: str, level: int | None) -> Any:
    return _get(results, "concurrency", backend, key, "levels", str(level), "turns_per_s")


def _spread(results: Result, level: int | None, ours: str, floor: str) -> str:
    """How the PostgreSQL rounds at ``level`` sessions spread: the rounds, turns per
    round, each side's range of turns/s and the range of round-by-round ratios."""
    cells = [
        _get(results, "concurrency", "postgres", key, "levels", str(level)) or {}
        for key in (ours, floor)
    ]
    mine, theirs = (cell.get("rounds") or [] for cell in cells)
    if not mine or not theirs:
        return ""
    turns = cells[0].get("turns", 0) // max(len(mine), 1)
    paired = [a / b for a, b in zip(mine, theirs, strict=False) if b]
    return (
        f"median of {len(mine)} rounds of {turns:,} turns; ours {min(mine):,.0f}–"
        f"{max(mine):,.0f} turns/s, floor {min(theirs):,.0f}–{max(theirs):,.0f}; "
        f"round by round {min(paired):.2f}–{max(paired):.2f}x"
    )


def check_targets(results: Result) -> list[Result]:
    """Each target: name, measured, required, met (None when not measured), gap, note,
    ceiling, and out_of_reach (what says that no implementation writing our rows can
    meet it on this machine; empty otherwise)."""
    out: list[Result] = []

    def add(
        name: str,
        measured: float | None,
        op: str,
        required: float,
        *,
        reach: tuple[str, float | None] | None = None,
        **extra: str,
    ) -> None:
        """``reach``: the floor that writes our rows, and its own ratio against the
        same anchor. Below a ``>=`` target, no implementation writing our rows (in the
        same way: one hop, one statement) can meet it on this machine: the target is
        out of reach, which the entry says."""
        met = None
        gap = ""
        if measured is not None:
            met = measured >= required if op == ">=" else measured <= required
            if not met:
                miss = (1 - measured / required) if op == ">=" else (measured / required - 1)
                gap = f"missed by {miss * 100:.0f}%" if required else "missed"
        beyond = ""
        if reach is not None and reach[1] is not None and op == ">=" and reach[1] < required:
            beyond = f"{reach[0]} itself reaches {_x(reach[1])}"
            if gap:
                gap += "; out of reach"
        out.append(
            {
                "target": name,
                "measured": None if measured is None else round(measured, 3),
                "required": f"{op} {required}",
                "met": met,
                "gap": gap,
                "note": extra.get("note", ""),
                "ceiling": extra.get("ceiling", ""),
                "out_of_reach": beyond,
            }
        )

    def ceiling(*pairs: tuple[str, float | None]) -> str:
        return "; ".join(f"{name} {_x(r)}" for name, r in pairs if r is not None)

    def cpt(backend: str, key: str) -> Any:
        return _tps(results, "commit_per_turn", backend, key)

    def vs(backend: str, key: str) -> float | None:
        return _ratio(cpt(backend, OURS[backend]), cpt(backend, key))

    # --- PostgreSQL, many sessions at once (group commit)
    level, note = _level(results, "postgres")

    def conc(key: str) -> Any:
        return _conc(results, "postgres", key, level)

    add(
        "PostgreSQL 100 sessions vs raw one-statement floor (same pool)",
        _ratio(conc("ours_pg"), conc("raw_asyncpg")),
        ">=",
        1.5,
        note="; ".join(
            part for part in (note, _spread(results, level, "ours_pg", "raw_asyncpg")) if part
        ),
    )
    add(
        "PostgreSQL 100 sessions vs SQLAlchemySession (same pool)",
        _ratio(conc("ours_pg"), conc("sdk_sqlalchemy_pg")),
        ">=",
        10.0,
        note=note,
        ceiling=ceiling(
            ("raw one-statement floor", _ratio(conc("raw_asyncpg"), conc("sdk_sqlalchemy_pg")))
        ),
    )
    errors = _get(results, "concurrency", "postgres", "ours_pg", "levels", str(level), "errors")
    add(
        "PostgreSQL 100 sessions: failed commits (ours)",
        None if errors is None else float(errors),
        "<=",
        0.0,
        note=note,
    )
    # --- the core's own CPU per commit (a backend that stores nothing)
    from .breakdown import CORE_CPU_GOAL_US

    core = _get(results, "core_cpu")
    if not core or "us" not in core:
        core = None
    add(
        "core CPU per commit (µs)",
        None if core is None else core["us"],
        "<=",
        CORE_CPU_GOAL_US,
        note=""
        if core is None
        else "median of {} fresh processes ({} µs), each the median of {} rounds; CPU time".format(
            len([p for p in _core_processes(core) if "us" in p]),
            ", ".join(_fmt(p["us"], 1) for p in _core_processes(core) if "us" in p),
            len([p for p in _core_processes(core) if "us" in p][0]["rounds_us"]),
        ),
    )
    # --- one session, commit per turn: guards against regression (issue 31)
    one_hop_bare = vs("sqlite", "raw_aiosqlite_1hop")
    raw_sqlite3 = vs("sqlite", "raw_sqlite3")
    add(
        "SQLite commit-per-turn vs 1-hop aiosqlite floor, our rows (guard)",
        vs("sqlite", "raw_aiosqlite_1hop_same"),
        ">=",
        0.8,
        note="; ".join(
            f"vs {name}: {r:.2f}x"
            for name, r in (
                ("the bare 1-hop floor", one_hop_bare),
                ("raw sqlite3, which blocks the event loop", raw_sqlite3),
            )
            if r is not None
        ),
    )
    one_hop_same_vs_sdk = _ratio(
        cpt("sqlite", "raw_aiosqlite_1hop_same"), cpt("sqlite", "sdk_sqlite")
    )
    add(
        "SQLite commit-per-turn vs SDK SQLiteSession (guard)",
        vs("sqlite", "sdk_sqlite"),
        ">=",
        1.0,
        reach=("the 1-hop floor writing our rows", one_hop_same_vs_sdk),
        ceiling=ceiling(
            ("1-hop floor, our rows", one_hop_same_vs_sdk),
            (
                "bare 1-hop floor",
                _ratio(cpt("sqlite", "raw_aiosqlite_1hop"), cpt("sqlite", "sdk_sqlite")),
            ),
        ),
    )
    bare_pg = vs("postgres", "raw_asyncpg")
    add(
        "PostgreSQL commit-per-turn vs one-statement floor, our rows (guard)",
        vs("postgres", "raw_asyncpg_same"),
        ">=",
        0.78,
        note="" if bare_pg is None else f"vs the bare one-statement floor: {bare_pg:.2f}x",
    )
    pg_same_vs_sqla = _ratio(
        cpt("postgres", "raw_asyncpg_same"), cpt("postgres", "sdk_sqlalchemy_pg")
    )
    add(
        "PostgreSQL commit-per-turn vs SQLAlchemySession (guard)",
        vs("postgres", "sdk_sqlalchemy_pg"),
        ">=",
        3.5,
        reach=("the one-statement floor writing our rows", pg_same_vs_sqla),
        ceiling=ceiling(
            (
                "raw one-statement floor",
                _ratio(cpt("postgres", "raw_asyncpg"), cpt("postgres", "sdk_sqlalchemy_pg")),
            ),
            ("one-statement floor, our rows", pg_same_vs_sqla),
        ),
    )
    out += peer_targets(results)
    for backend in ("sqlite", "postgres"):
        sizes = _get(results, "history", backend, OURS[backend], "sizes") or {}
        measured: float | None = None
        note = ""
        if sizes:
            small, big = min(sizes, key=int), max(sizes, key=int)
            measured = _ratio(sizes[big]["limit20_ms"], sizes[small]["limit20_ms"])
            note = f"{int(big):,} vs {int(small):,} items"
        add(
            f"{BACKEND_TITLE[backend]} get_items(limit=20): largest / smallest history",
            measured,
            "<=",
            1.5,
            note=note,
        )
    for backend in ("sqlite", "postgres"):
        entry = _get(results, "history", backend, OURS[backend]) or {}
        cells = {
            int(n): cell["turn_ops"]
            for n, cell in (entry.get("sizes") or {}).items()
            if "turn_ops" in cell
        }
        if not cells:
            continue  # a run from before these were timed: no target to report
        small, big = min(cells), max(cells)
        for key, what in (
            ("turns_last5_ms", "turns(last=5)"),
            ("turns5_ms", "get_items(turns=5)"),
            ("rewind2_undo_ms", "rewind of the newest 2 turns + undo"),
            ("fork2_ms", "fork(at_turn=2)"),
        ):
            measured = _ratio(cells[big].get(key), cells[small].get(key))
            note = f"{big:,} vs {small:,} items"
            add(
                f"{BACKEND_TITLE[backend]} {what}: largest / smallest history",
                measured,
                "<=",
                1.5,
                note=note,
            )
    for backend in ("sqlite", "postgres"):
        mem = _get(results, "memory", backend) or {}
        turns = mem.get("turns")
        note = f"over {turns:,} turns" if turns else ""
        title = BACKEND_TITLE[backend]
        add(f"{title} RSS growth (MB)", mem.get("rss_growth_mb"), "<=", 5.0, note=note)
        add(f"{title} tracemalloc growth (MB)", mem.get("traced_growth_mb"), "<=", 5.0, note=note)
        alive = _get(mem, "agent", "agents_alive")
        add(
            f"{title} Agents retained after Runner.run",
            None if alive is None else float(alive),
            "<=",
            0.0,
            note=f"{_get(mem, 'agent', 'runs')} runs" if alive is not None else "",
        )
    return out


# ----------------------------------------------------------------------------- (g) peers


def _peer_levels(results: Result, backend: str) -> list[int]:
    data = _get(results, "peers", backend) or {}
    return sorted({int(n) for e in data.values() for n in e.get("levels", {})})


def _sessions(n: int) -> str:
    return f"{n} session" + ("" if n == 1 else "s")


def peer_targets(results: Result) -> list[Result]:
    """``ours ahead of <peer> on <backend>, <n> sessions``: ours ÷ the peer >= 1.0 for
    every peer and level of (g); a peer that did not run is *not measured*, with why."""
    out: list[Result] = []
    quick = bool(_get(results, "meta", "quick"))
    for backend in ("sqlite", "postgres"):
        data = _get(results, "peers", backend) or {}
        ours = data.get(OURS[backend]) or {}
        levels = _peer_levels(results, backend) or list(_get(results, "peers", "levels") or [])
        for entry in data.values():
            if entry.get("kind") != "peer":
                continue
            why = entry.get("missing") or entry.get("error") or ""
            for n in levels:
                measured = _ratio(
                    _get(ours, "levels", str(n), "turns_per_s"),
                    _get(entry, "levels", str(n), "turns_per_s"),
                )
                note = why or ("quick run" if quick else "")
                met = None if measured is None else measured >= 1.0
                out.append(
                    {
                        "target": f"ours ahead of {entry['label']} on "
                        f"{BACKEND_TITLE[backend]}, {_sessions(n)}",
                        "measured": None if measured is None else round(measured, 3),
                        "required": ">= 1.0",
                        "met": met,
                        "gap": ""
                        if measured is None or met
                        else f"missed by {(1 - measured) * 100:.0f}%",
                        "note": note,
                        "ceiling": "",
                        "out_of_reach": "",
                    }
                )
    return out


PEERS_TEXT = (
    "Each turn, every subject reads the session's whole history (what the next turn "
    "loads), then stores the turn's 4 items durably: ours `get_items()` then `add_items` + "
    "`commit()`; the SDK's sessions `get_items()` then `add_items`; LangGraph one "
    "`ainvoke` of a `StateGraph` over `MessagesState` (`add_messages`) with the saver as "
    "checkpointer and the 4 messages as input (`thread_id` = session; it loads the "
    'checkpoint and writes the new one before returning, `durability="exit"`: 1 '
    "checkpoint per turn); ADK `get_session` (`create_session` on a session's first turn) "
    "then one `append_event` per item (4 transactions per turn, ADK's API). Sessions are "
    "{turns} turns long, then a new one starts, so every subject reads and writes "
    "histories of the same sizes; at more than one session each asyncio task makes its "
    "own sessions. Medians of {rounds} interleaved rounds (order rotating); p50/p99 per "
    "turn over all rounds. SQLite: one file per subject; PostgreSQL: a fresh schema per "
    "subject and {pool} pool connections each. Every session was read back afterwards "
    "(4 items, messages or events per turn) and every history read checked."
)


def _peer_cell(entry: Result, n: int) -> str:
    if entry.get("missing"):
        return "not installed"
    if entry.get("error"):
        return "failed to open"
    cell = _get(entry, "levels", str(n)) or {}
    text = _fmt(cell.get("turns_per_s"))
    if cell.get("errors"):
        text += f" ({cell['errors']} err)"
    if cell.get("stopped"):
        text += " (time budget)"
    if cell and not cell.get("verified", True):
        text += " **NOT VERIFIED**"
    return text


def peers_tables(results: Result, level: str = "##", *, durability: bool = True) -> list[str]:
    """(g): a table per backend (and, with ``durability``, the settings read back)."""
    data = results.get("peers")
    if not data:
        return []
    lines = [f"{level} (g) Peers: the stores users would pick instead", ""]
    lines += [
        PEERS_TEXT.format(
            turns=data.get("session_turns"), rounds=data.get("rounds"), pool=data.get("pool")
        ),
        "",
    ]
    for backend in ("sqlite", "postgres"):
        entries = data.get(backend)
        if not entries:
            continue
        ours = entries.get(OURS[backend]) or {}
        levels = _peer_levels(results, backend) or list(data.get("levels") or [])
        rows = []
        for e in entries.values():
            row = [e["label"], f"{e.get('package', '')} {e.get('version', '')}".strip()]
            row += [_peer_cell(e, n) for n in levels]
            for n in levels:
                cell = _get(e, "levels", str(n)) or {}
                row.append(f"{_fmt(cell.get('p50_ms'), 2)} / {_fmt(cell.get('p99_ms'), 2)}")
            row += [
                ""
                if e.get("kind") == "ours"
                else _x(
                    _ratio(
                        _get(ours, "levels", str(n), "turns_per_s"),
                        _get(e, "levels", str(n), "turns_per_s"),
                    )
                )
                for n in levels
            ]
            rows.append(row)
        header = ["subject", "package"]
        header += [f"turns/s, {_sessions(n)}" for n in levels]
        header += [f"p50 / p99 ms, {_sessions(n)}" for n in levels]
        header += [f"ours ÷ this, {_sessions(n)}" for n in levels]
        lines += [f"{BACKEND_TITLE[backend]}:", ""] + _table(header, rows) + [""]
        for e in entries.values():
            for n, cell in e.get("levels", {}).items():
                if cell.get("error_kinds"):
                    first = next(iter(cell["error_kinds"].items()))
                    lines.append(
                        f"- {e['label']} x{n}: {cell['errors']} failed turns, e.g. "
                        f"{first[1]}x `{first[0][:140]}`"
                    )
                if cell.get("problems"):
                    lines.append(f"- {e['label']} x{n}: {'; '.join(cell['problems'])}")
                if cell.get("stopped"):
                    lines.append(
                        f"- {e['label']} x{n}: the {data.get('budget_s', 0):.0f} s budget per "
                        f"round stopped it: {cell['turns']:,} of {cell['attempted']:,} turns in "
                        f"{len(cell.get('rounds', []))} rounds (its sessions shorter than the "
                        "others', so its figure flatters it)"
                    )
            if e.get("missing") or e.get("error"):
                lines.append(f"- {e['label']}: {e.get('missing') or e.get('error')}")
        if lines[-1] != "":
            lines.append("")
        if durability:
            lines += _peer_durability(entries, backend)
    return lines


def _peer_durability(entries: Result, backend: str) -> list[str]:
    names: list[str] = []
    for e in entries.values():
        for name in e.get("durability") or {}:
            if name != "error" and name not in names:
                names.append(name)
    rows = []
    for e in entries.values():
        found = e.get("durability")
        if not found:
            continue
        if "error" in found:
            rows.append(
                [e["label"], f"not readable: {found['error'][:80]}"] + [""] * (len(names) - 1)
            )
            continue
        rows.append([e["label"]] + [f"`{found.get(n, '–')}`" for n in names])
    if not rows:
        return []
    return (
        [
            f"{BACKEND_TITLE[backend]} settings of (g), read back from each subject's own "
            "connection(s) after its last round:",
            "",
        ]
        + _table(["subject"] + [n.replace("_", " ") for n in names], rows)
        + [""]
    )


def peer_versions(results: Result) -> str:
    """The installed peer packages of (g), for the header's Versions line."""
    found = _get(results, "peers", "versions") or {}
    return ", ".join(f"{name} {v}" for name, v in found.items() if v != "not installed")


# ----------------------------------------------------------------------------- markdown

KIND = {
    ("ours", ""): "ours",
    ("floor", "bare"): "floor: item rows only",
    ("floor", "same"): "floor: our rows",
    ("anchor", ""): "SDK",
}

#: What each workload's ratios compare, including how many durable writes each side makes.
COMPARES = {
    "a": (
        "Each call makes one turn (4 items) durable: one transaction and one WAL flush "
        "(SQLite: an fsync of the WAL; PostgreSQL: a WAL flush) per turn, for every "
        "subject. Ours and the floors marked *our rows* write the same rows: {rows}. "
        "Floors marked *item rows only* write 4 rows into one table with one index. The "
        "SDK's sessions write their own session row and 4 message rows."
    ),
    "b": (
        "Per 5-turn run: ours stages the 5 turns and commits once (1 transaction, 1 WAL "
        "flush); the floors write the run in 1 transaction (1 flush); the SDK's sessions "
        "must write each turn as it comes (5 transactions, 5 flushes). Ratios against the "
        "SDK therefore compare 1 flush with 5: they show what buffering buys, not a faster "
        "write."
    ),
    "c": (
        "Every session commits each turn separately, all sessions at once. Floors and the "
        "SDK's sessions run one transaction per commit (PostgreSQL may still flush the WAL "
        "once for several transactions that end together; SQLite fsyncs each). Ours shares "
        "one transaction among the commits that arrive together (group commit); the "
        "*commits per transaction* row gives how many, counted afterwards from the stored "
        "batch records (warm-up turns included). Ratios at more than one session thus "
        "compare fewer, larger transactions (ours) with one per commit (the others)."
    ),
    "d": (
        "Reads only. `limit=20` reads the newest 20 items; *full* reads the whole session. "
        "Each subject reads its own tables (bare floors: one table, one index)."
    ),
}


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _kind(entry: Result) -> str:
    kind = str(entry.get("kind", ""))
    return KIND.get((kind, str(entry.get("work", ""))), kind)


def _disk_text(disk: Any) -> str:
    if not isinstance(disk, dict):
        return "not recorded"
    if "error" in disk:
        return f"unknown ({disk['error']})"
    parts = [str(disk.get("device", "?"))]
    if disk.get("bus") and disk.get("bus") != "other":
        parts.append(disk["bus"])
    if disk.get("model"):
        parts.append(f"model {disk['model']}")
    if "rotational_flag" in disk:
        parts.append(f"rotational flag {disk['rotational_flag']}")
    if "write_cache" in disk:
        parts.append(f"write cache: {disk['write_cache']}")
    text = ", ".join(parts)
    if disk.get("filesystem"):
        text += f"; {disk['filesystem']} filesystem"
    return text


def source_line(meta: Result) -> str:
    src = meta.get("source")
    if not isinstance(src, dict):
        return "Code measured: not recorded by this run."
    text = f"Code measured: commit `{str(src.get('commit'))[:12]}`"
    if src.get("subject"):
        text += f" ({src['subject']})"
    modified = src.get("modified_files") or []
    if modified:
        text += f", plus uncommitted changes to {', '.join(f'`{m}`' for m in modified)}"
    return text + "."


def header(results: Result) -> list[str]:
    meta = results["meta"]
    m = meta["machine"]
    cores = m.get("cores")
    usable = m.get("cores_usable", cores)
    cpu = f"{cores} CPU cores" + (f" ({usable} usable by this process)" if usable != cores else "")
    virt = "; virtual machine" if m.get("virtualized") else ""
    lines = [
        f"- {source_line(meta)}",
        f"- Run: {m['date']}; took {meta.get('seconds', 0):.0f} s; command: `{meta['command']}`",
        f"- Machine (detected): {cpu}, {m['cpu']}{virt}; {m['ram_gb']} GB RAM; {m['os']}",
        f"- Disk of the SQLite files: {_disk_text(meta.get('sqlite_disk'))}",
    ]
    if meta.get("postgres_disk"):
        lines.append(f"- Disk of the PostgreSQL data: {_disk_text(meta['postgres_disk'])}")
    fsync = meta.get("fsync")
    if isinstance(fsync, dict):
        lines.append(
            f"- One 4 KiB write + fsync on the SQLite files' disk, measured at the start: "
            f"median {fsync['median_us']:,.0f} µs, p90 {fsync['p90_us']:,.0f} µs"
        )
    lines += [
        f"- Load average at start {m['loadavg_start']}, at end {meta.get('loadavg_end')} "
        f"(on {cores} cores). Figures are medians of rounds with subjects interleaved (order "
        "rotating), so a busy moment lands on every subject; the ratios (same process, same "
        "data, same moment) are the result, absolute figures depend on the machine.",
        f"- Versions: Python {m['python']}, SQLite {m['sqlite']}, PostgreSQL server "
        f"{meta.get('postgres_server') or '–'}, openai-agents {m['openai-agents']}, "
        f"txsessions {m['txsessions']}, aiosqlite {m['aiosqlite']}, asyncpg {m['asyncpg']}, "
        f"SQLAlchemy {m['sqlalchemy']}"
        + (f"; peers: {peer_versions(results)}" if peer_versions(results) else ""),
        f"- Items: 4 per turn (user message, function_call, function_call_output, assistant "
        f"message), {meta['item_bytes']:.0f} bytes of JSON each on average. PostgreSQL pool: "
        f"{meta['pool']} connections for every PostgreSQL subject in (c), 2 in the "
        "single-session workloads.",
    ]
    for note in meta.get("notes", []):
        lines.append(f"- Note: {note}")
    return lines


def durability_tables(results: Result) -> list[str]:
    data = results.get("durability") or {}
    if not data:
        return ["Not read back by this run.", ""]
    lines: list[str] = []
    for backend in ("sqlite", "postgres"):
        entries = data.get(backend) or {}
        if not entries:
            continue
        names: list[str] = []
        for entry in entries.values():
            for name in entry:
                if name not in ("label", "error") and name not in names:
                    names.append(name)
        rows = []
        for entry in entries.values():
            if "error" in entry:
                rows.append(
                    [entry["label"], f"not readable: {entry['error'][:80]}"]
                    + [""] * (len(names) - 1)
                )
                continue
            rows.append([entry["label"]] + [f"`{entry.get(n, '–')}`" for n in names])
        lines += [
            f"{BACKEND_TITLE[backend]}, as read back from each subject's own connection(s) "
            "after its workload:",
            "",
        ]
        lines += _table(["subject"] + [n.replace("_", " ") for n in names], rows)
        lines.append("")
    return lines


def targets_table(results: Result) -> list[str]:
    targets = check_targets(results)  # today's targets, whatever the run recorded
    if not targets:
        return []
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
    lines = _table(
        ["target", "measured", "required", "status", "gap", "ceiling: floor ÷ anchor", "note"],
        rows,
    )
    return lines + [
        "",
        "The ceiling column is what the raw-driver floor itself reaches against the "
        "anchor in this same run: an implementation doing at least the floor's durable work "
        "cannot be expected to beat it. A target is *out of reach* when the floor writing "
        "our rows (the same statements, with no code of ours around them) is itself below "
        "it in the ceiling column: what is missing is the database engine's work for those rows, or the thread "
        "hop that keeps the event loop free, not our code.",
        "",
    ]


def same_work_rows(results: Result, items: str = "items") -> str:
    """What this run's same-work floors wrote per commit, in words."""
    from ._data import SAME_WORK_ROWS_BEFORE

    rows = results.get("meta", {}).get("same_work_rows") or SAME_WORK_ROWS_BEFORE
    words = [items if row == "items" else row for row in rows]
    return ", ".join(words[:-1]) + " and " + words[-1]


def _section_a(results: Result, backend: str, level: str) -> list[str]:
    cpt = _get(results, "commit_per_turn", backend)
    if not cpt:
        return []
    title = BACKEND_TITLE[backend]
    base = _get(cpt, OURS[backend], "turns_per_s")
    rows = [
        [
            e["label"],
            _kind(e),
            _fmt(e["turns_per_s"]),
            _fmt(e["p50_ms"], 2),
            _fmt(e["p99_ms"], 2),
            _x(_ratio(base, e["turns_per_s"])),
        ]
        for e in cpt.values()
    ]
    return (
        [
            f"{level} (a) {title}: one session, commit per turn",
            "",
            COMPARES["a"].format(rows=same_work_rows(results, "4 item rows")),
            "",
        ]
        + _table(["subject", "kind", "turns/s", "p50 ms", "p99 ms", "ours ÷ this"], rows)
        + [""]
    )


def _section_b(results: Result, backend: str, level: str) -> list[str]:
    run = _get(results, "buffered_run", backend)
    if not run:
        return []
    title = BACKEND_TITLE[backend]
    base = _get(run, OURS[backend], "runs_per_s")
    rows = [
        [
            e["label"],
            _kind(e),
            "5" if e.get("kind") == "anchor" else "1",
            _fmt(e["runs_per_s"]),
            _fmt(e["turns_per_s"]),
            _x(_ratio(base, e["runs_per_s"])),
        ]
        for e in run.values()
    ]
    header = ["subject", "kind", "transactions per run", "runs/s", "turns/s", "ours ÷ this"]
    return (
        [f"{level} (b) {title}: 5-turn tool run", "", COMPARES["b"], ""]
        + _table(header, rows)
        + [""]
    )


def _conc_cell(cell: Result) -> str:
    if "error" in cell:
        return "failed to open"
    if "skipped" in cell:
        return "skipped: too slow"
    text = _fmt(cell.get("turns_per_s"))
    if cell.get("errors"):
        text += f" ({cell['errors']} err)"
    if cell.get("timed_out"):
        text += " (timed out)"
    return text


def _section_c(results: Result, backend: str, level: str) -> list[str]:
    conc = _get(results, "concurrency", backend)
    if not conc:
        return []
    ours = OURS[backend]
    levels = sorted({int(n) for e in conc.values() for n in e["levels"]})
    rows = []
    for e in conc.values():
        row = [e["label"], _kind(e)]
        row += [_conc_cell(e["levels"].get(str(n), {})) for n in levels]
        row += [
            _x(
                _ratio(
                    _get(conc, ours, "levels", str(n), "turns_per_s"),
                    _get(e, "levels", str(n), "turns_per_s"),
                )
            )
            for n in levels
        ]
        rows.append(row)
    group = ["commits per transaction (ours)", ""]
    for n in levels:
        cell = _get(conc, ours, "levels", str(n)) or {}
        group.append(_fmt(_ratio(cell.get("batches"), cell.get("transactions")), 1))
    group += [""] * len(levels)
    if any(c not in ("–", "") for c in group[2:]):
        rows.append(group)
    header = (
        ["subject", "kind"]
        + [f"x{n} turns/s" for n in levels]
        + [f"ours ÷ this @x{n}" for n in levels]
    )
    lines = [f"{level} (c) {BACKEND_TITLE[backend]}: many sessions at once, commit per turn", ""]
    lines += [COMPARES["c"], ""] + _table(header, rows) + [""]
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
    return lines + [""]


def _section_d(results: Result, backend: str, level: str) -> list[str]:
    lines: list[str] = []
    for part, what, unit in (
        ("history", "history length (items in the session)", "items"),
        ("sessions", "number of sessions in the database (reading a 20-item session)", "sessions"),
    ):
        data = _get(results, part, backend)
        if not data:
            continue
        sizes = sorted({int(n) for e in data.values() for n in e["sizes"]})
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
        lines += [f"{level} (d) {BACKEND_TITLE[backend]}: read latency (median ms) vs {what}", ""]
        lines += [COMPARES["d"], ""] + _table(header, rows) + [""]
    lines += _turn_ops_table(results, backend, level)
    return lines


#: The turn operations of (d1), ``turn_ops`` of each size: (key, what, digits).
TURN_OPS = (
    ("turns_last5_ms", "turns(last=5)", 3),
    ("turns5_ms", "get_items(turns=5)", 3),
    ("rewind2_undo_ms", "rewind of the newest 2 turns + undo_rewind()", 3),
    ("fork2_ms", "fork(at_turn=2) into a new id", 3),
    ("usage_ms", "usage()", 3),
    ("turns_ms", "turns() (every turn)", 3),
    ("turns_us_per_turn", "turns(): µs per turn returned", 2),
)


def _turn_ops_table(results: Result, backend: str, level: str) -> list[str]:
    """(d1) our turn operations vs the history's length (median ms)."""
    entry = _get(results, "history", backend, OURS[backend]) or {}
    sizes = sorted(int(n) for n, cell in (entry.get("sizes") or {}).items() if "turn_ops" in cell)
    if not sizes:
        return []

    def ops(n: int) -> Result:
        found: Result = entry["sizes"][str(n)]["turn_ops"]
        return found

    rows = [
        [what] + [_fmt(ops(n).get(key), digits) for n in sizes] for key, what, digits in TURN_OPS
    ]
    rows.append(["turns in the session"] + [_fmt(ops(n).get("turn_count")) for n in sizes])
    header = ["operation (ours)"] + [f"@{n:,} items" for n in sizes]
    title = f"{level} (d) {BACKEND_TITLE[backend]}: turn operations (median ms) vs history length"
    note = (
        "One session grown in turns of 20 items (5 tool-using turns of the workload's "
        "items each); the rewind is undone each time, the forks are deleted afterwards "
        "(untimed)."
    )
    return [title, "", note, ""] + _table(header, rows) + [""]


def _section_e(results: Result, level: str) -> list[str]:
    mem = results.get("memory")
    if not mem:
        return []
    rows = []
    for backend, e in mem.items():
        name = BACKEND_TITLE.get(backend, backend)
        if "error" in e:
            rows.append([name, "error: " + e["error"][:100]] + ["–"] * 5)
            continue
        rows.append(
            [
                name,
                f"{e['turns']:,} after {e['warmup']:,}",
                _fmt(e["rss_growth_mb"], 2),
                _fmt(e["traced_growth_mb"], 3),
                _fmt(e["traced_peak_mb"], 2),
                f"{e['agent']['agents_alive']} of {e['agent']['runs']}",
                _fmt(e["turns_per_s_untraced"]),
            ]
        )
    header = [
        "backend",
        "turns",
        "RSS growth MB",
        "tracemalloc growth MB",
        "traced peak MB",
        "Agents alive after Runner.run",
        "turns/s",
    ]
    title = "(e) Memory (fresh process; each turn: new session object, read 20, add 4, commit)"
    return [f"{level} {title}", ""] + _table(header, rows) + [""]


def _core_processes(core: Result) -> list[Result]:
    """The fresh processes of a core-CPU figure (results written before they were
    several: the figure itself, one process)."""
    if "processes" in core:
        return list(core["processes"])
    return [{**core, "when": "one process"}]


def core_cpu_section(results: Result, level: str = "##") -> list[str]:
    """The core's own CPU per commit (``benchmarks/breakdown.py``'s ``core_cpu``, in
    fresh processes spread through the run: ``_run.merge_core_cpu``)."""
    core = results.get("core_cpu")
    if not core:
        return []
    if "us" not in core:
        return [f"{level} The core's own CPU per commit", "", f"- could not measure: {core}", ""]
    processes = _core_processes(core)
    rounds = len([p for p in processes if "us" in p][0]["rounds_us"])
    lines = [
        f"{level} The core's own CPU per commit",
        "",
        f"**{_fmt(core['us'], 1)} µs** per `add_items(4 items)` + `commit()` (goal: at most "
        f"{core['goal_us']} µs): one session over a backend that stores nothing, integrity "
        f"at its default; CPU time (`time.process_time`) in a hot loop. Measured in "
        f"{len(processes)} fresh process(es) spread through the run, each the median "
        f"of {rounds} rounds of {core['turns_per_round']:,} turns; the "
        "figure is the median of the processes. What the core itself costs every commit, "
        "whatever the database: staging, validation and encoding, the history rules, the "
        "shield, the commit path.",
        "",
    ]
    rows = []
    for process in processes:
        load = process.get("loadavg")
        load_text = "" if not load else ", ".join(_fmt(x, 2) for x in load)
        if "us" in process:
            rounds = ", ".join(_fmt(v, 1) for v in process["rounds_us"])
            rows.append([process["when"], _fmt(process["us"], 1), rounds, load_text])
        else:
            rows.append([process["when"], "error", str(process.get("error"))[:120], load_text])
    return lines + _table(["when", "µs (median)", "rounds (µs)", "load average"], rows) + [""]


def breakdown_tables(results: Result, level: str = "##") -> list[str]:
    """(f): microseconds per turn, step by step (see ``benchmarks/breakdown.py``)."""
    from .breakdown import POSTGRES_TABLE, SQLITE_TABLE, derive

    data = results.get("breakdown")
    if not data:
        return []
    lines = [
        f"{level} (f) Where one commit's time goes",
        "",
        f"Median of {data['rounds']} rounds of {data['turns_per_round']} turns per step, steps "
        "interleaved; one session, commit per turn, 4 items. Rows starting with *of which* "
        "or *+* are differences of two medians (`python -m benchmarks.breakdown`).",
        "",
    ]
    for backend, table in (("sqlite", SQLITE_TABLE), ("postgres", POSTGRES_TABLE)):
        steps = data.get(backend)
        if not steps:
            continue
        rows = []
        for expression, what in table:
            value = derive(steps, expression)
            if value is not None:  # a step this run did not measure (an older run) is left out
                rows.append([what, _fmt(value, 0)])
        lines += [f"{BACKEND_TITLE[backend]}:", ""]
        lines += _table(["step", "µs per turn"], rows) + [""]
    return lines


def body(results: Result, level: str = "##") -> list[str]:
    """Everything below the header: durability, targets, every workload's tables."""
    lines = [f"{level} Durability", ""] + durability_tables(results)
    targets = targets_table(results)
    if targets:
        lines += [f"{level} Targets", ""] + targets
    for backend in ("sqlite", "postgres"):
        for section in (_section_a, _section_b, _section_c, _section_d):
            lines += section(results, backend, level)
    lines += _section_e(results, level)
    lines += core_cpu_section(results, level)
    lines += breakdown_tables(results, level)
    lines += peers_tables(results, level)
    for failure in results.get("failures", []):
        lines.append(f"- could not measure: {failure}")
    return lines


def markdown(results: Result) -> str:
    quick = " (QUICK run: tiny sizes, not meaningful)" if results["meta"]["quick"] else ""
    lines = [f"# txsessions benchmarks{quick}", ""] + header(results) + [""] + body(results)
    return "\n".join(lines).rstrip("\n") + "\n"


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
    peers = peers_plot(results, directory)
    if peers:
        written.append(peers)
    return written


PEERS_PLOT = "peers_throughput.png"
#: one colour per store on both panels (keys without their backend suffix)
_PEER_COLORS = {
    "ours": "tab:blue",
    "sdk_sqlalchemy": "tab:orange",
    "sdk_advanced": "tab:green",
    "langgraph": "tab:red",
    "adk": "tab:purple",
}


def peers_plot(results: Result, directory: str) -> str | None:
    """(g): turns/s of every subject at each level, one panel per backend (log scale)."""
    data = results.get("peers") or {}
    backends = [b for b in ("sqlite", "postgres") if data.get(b)]
    if not backends:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(backends), figsize=(6.5 * len(backends), 5.5), squeeze=False)
    for ax, backend in zip(axes[0], backends, strict=True):
        levels = _peer_levels(results, backend)
        entries = [(k, e) for k, e in data[backend].items() if e.get("levels")]
        width = 0.8 / max(1, len(entries))
        top = 1.0
        for i, (key, e) in enumerate(entries):
            xs = [j + (i - (len(entries) - 1) / 2) * width for j in range(len(levels))]
            ys = [_get(e, "levels", str(n), "turns_per_s") or 0 for n in levels]
            top = max([top, *ys])
            bars = ax.bar(
                xs,
                ys,
                width,
                label=e["label"],
                color=_PEER_COLORS.get(key.rsplit("_", 1)[0]),
                edgecolor="black" if e.get("kind") == "ours" else None,
                linewidth=1.5 if e.get("kind") == "ours" else 0,
            )
            ax.bar_label(bars, labels=[_fmt(y, 0) for y in ys], fontsize=6, rotation=90, padding=2)
        ax.set_yscale("log")
        low = min([y for b in ax.containers for y in b.datavalues if y > 0], default=1.0)
        ax.set_ylim(low / 2, top * 3)  # room for the labels
        ax.set_xticks(range(len(levels)), [_sessions(n) for n in levels])
        ax.set_ylabel("turns / s (read history, then store 4 items durably)")
        ax.set_title(f"{BACKEND_TITLE[backend]}: ours and the peers")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    fig.tight_layout()
    path = os.path.join(directory, PEERS_PLOT)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(out: str, name: str, report: Result, markdown: str) -> None:
    """A separate command's results: ``<out>/<name>.json`` (all of ``report``) and
    ``<out>/<name>.md`` (``markdown``, the table the docs include)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(out, f"{name}.md"), "w", encoding="utf-8") as fh:
        fh.write(markdown)

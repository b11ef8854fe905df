"""The benchmark report's targets: the per-commit guards (issue 31) are judged against
the floors that write our rows, a missed guard is marked *out of reach* exactly when that
floor is itself below it, and the 100-session target prints how its rounds spread.

Pure report logic over a results dict shaped like ``benchmarks/results/latest.json``:
no benchmark runs here, and no speed is judged.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks._report import check_targets, targets_table

PG_SAME = "PostgreSQL commit-per-turn vs one-statement floor, our rows (guard)"
PG_SQLA = "PostgreSQL commit-per-turn vs SQLAlchemySession (guard)"
SQLITE_SAME = "SQLite commit-per-turn vs 1-hop aiosqlite floor, our rows (guard)"
SQLITE_SDK = "SQLite commit-per-turn vs SDK SQLiteSession (guard)"
PG_100 = "PostgreSQL 100 sessions vs raw one-statement floor (same pool)"


def _results(sqlite: dict[str, int], postgres: dict[str, int]) -> dict[str, Any]:
    def cells(rates: dict[str, int]) -> dict[str, Any]:
        return {key: {"turns_per_s": rate} for key, rate in rates.items()}

    return {"commit_per_turn": {"sqlite": cells(sqlite), "postgres": cells(postgres)}}


def _target(results: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [t for t in check_targets(results) if t["target"] == name]
    return found


@pytest.mark.parametrize(("ours", "met"), [(780, True), (900, True), (700, False)])
def test_the_postgres_guard_is_ours_over_the_floor_writing_our_rows(ours: int, met: bool) -> None:
    results = _results({}, {"ours_pg": ours, "raw_asyncpg": 1250, "raw_asyncpg_same": 1000})
    target = _target(results, PG_SAME)
    assert target["required"] == ">= 0.78"
    assert target["met"] is met
    assert target["gap"] == ("" if met else "missed by 10%")
    assert target["note"] == f"vs the bare one-statement floor: {ours / 1250:.2f}x"


def test_a_guard_the_same_rows_floor_itself_misses_is_out_of_reach() -> None:
    # SQLAlchemySession at 300: the floor writing our rows reaches 1000 / 300 = 3.33x.
    results = _results(
        {},
        {"ours_pg": 900, "raw_asyncpg": 1250, "raw_asyncpg_same": 1000, "sdk_sqlalchemy_pg": 300},
    )
    target = _target(results, PG_SQLA)
    assert target["met"] is False
    assert target["gap"] == "missed by 14%; out of reach"
    assert target["out_of_reach"] == "the one-statement floor writing our rows itself reaches 3.33x"
    row = next(line for line in targets_table(results) if line.startswith(f"| {PG_SQLA} |"))
    assert "out of reach" in row and "3.33x" in row


def test_a_guard_the_same_rows_floor_meets_is_only_missed() -> None:
    results = _results(
        {},
        {"ours_pg": 900, "raw_asyncpg": 1250, "raw_asyncpg_same": 1000, "sdk_sqlalchemy_pg": 270},
    )
    # ours 900 / 270 = 3.33x; the floor writing our rows 1000 / 270 = 3.70x: reachable.
    target = _target(results, PG_SQLA)
    assert target["met"] is False and target["gap"] == "missed by 5%"
    assert target["out_of_reach"] == ""


def test_the_sqlite_guards_are_judged_against_the_one_hop_floor_writing_our_rows() -> None:
    sqlite = {
        "ours_sqlite": 2600,
        "raw_aiosqlite_1hop_same": 3400,  # ours 0.76x of it
        "raw_aiosqlite_1hop": 4350,
        "raw_sqlite3_same": 5000,
        "raw_sqlite3": 7000,
        "sdk_sqlite": 2750,  # the 1-hop floor writing our rows: 1.24x SQLiteSession
    }
    results = _results(sqlite, {})
    same = _target(results, SQLITE_SAME)
    assert same["met"] is False and same["gap"] == "missed by 4%"
    assert same["note"] == (
        "vs the bare 1-hop floor: 0.60x; vs raw sqlite3, which blocks the event loop: 0.37x"
    )
    sdk = _target(results, SQLITE_SDK)
    assert sdk["required"] == ">= 1.0"
    assert sdk["met"] is False and sdk["out_of_reach"] == ""
    assert "1-hop floor, our rows 1.24x" in sdk["ceiling"]


def test_the_100_session_target_prints_its_rounds_and_their_spread() -> None:
    def level(rounds: list[float]) -> dict[str, Any]:
        return {
            "levels": {
                "100": {
                    "turns_per_s": sorted(rounds)[2],
                    "rounds": rounds,
                    "turns": 8000 * len(rounds),
                }
            }
        }

    results = {
        "concurrency": {
            "postgres": {
                "ours_pg": level([15000, 16000, 14000, 17000, 15500]),
                "raw_asyncpg": level([10000, 9000, 10000, 11000, 10000]),
            }
        }
    }
    target = _target(results, PG_100)
    assert target["measured"] == round(15500 / 10000, 3) and target["met"] is True
    assert target["note"] == (
        "median of 5 rounds of 8,000 turns; ours 14,000–17,000 turns/s, floor 9,000–11,000; "
        "round by round 1.40–1.78x"
    )


def test_a_peer_behind_ours_is_met_ahead_of_ours_missed_and_absent_not_measured() -> None:
    def entry(label: str, kind: str, rates: dict[str, int], **extra: str) -> dict[str, Any]:
        levels = {n: {"turns_per_s": rate} for n, rate in rates.items()}
        return {"label": label, "kind": kind, "levels": levels, **extra}

    results = {
        "peers": {
            "levels": [1, 100],
            "sqlite": {
                "ours_sqlite": entry("ours", "ours", {"1": 900, "100": 5000}),
                "langgraph_sqlite": entry("LangGraph", "peer", {"1": 300, "100": 6000}),
                "adk_sqlite": entry("ADK", "peer", {}, missing="not installed (no google.adk)"),
            },
        }
    }
    found = {t["target"]: t for t in check_targets(results)}
    assert found["ours ahead of LangGraph on SQLite, 1 session"]["met"] is True
    behind = found["ours ahead of LangGraph on SQLite, 100 sessions"]
    assert behind["met"] is False and behind["gap"] == "missed by 17%"
    absent = found["ours ahead of ADK on SQLite, 100 sessions"]
    assert absent["met"] is None and absent["note"].startswith("not installed")
    assert not any("PostgreSQL, " in name for name in found)


CORE_CPU = "core CPU per commit (µs)"


def _process(us: float, when: str) -> dict[str, object]:
    return {
        "us": us,
        "rounds_us": [us] * 3,
        "turns_per_round": 1000,
        "goal_us": 16,
        "clock": "process_time",
        "when": when,
        "loadavg": [0.5, 0.4, 0.3],
    }


@pytest.mark.parametrize(("us", "met"), [(15.2, True), (16.0, True), (17.6, False)])
def test_the_core_cpu_per_commit_is_a_target_of_its_own(us: float, met: bool) -> None:
    from benchmarks._report import core_cpu_section
    from benchmarks._run import merge_core_cpu

    core = merge_core_cpu([_process(us, "before"), _process(us, "after")])
    results = {**_results({}, {}), "core_cpu": core}
    target = _target(results, CORE_CPU)
    assert target["required"] == "<= 16" and target["met"] is met
    assert target["note"].startswith("median of 2 fresh processes")
    assert any(f"{us:.1f} µs" in line for line in core_cpu_section(results))


def test_the_core_cpu_figure_is_the_median_of_its_processes_each_shown() -> None:
    from benchmarks._report import core_cpu_section
    from benchmarks._run import merge_core_cpu

    failed = {"error": "exit 1: boom", "when": "between", "loadavg": [1.0, 1.0, 1.0]}
    core = merge_core_cpu(
        [_process(30.1, "before"), failed, _process(18.2, "middle"), _process(19.4, "after")]
    )
    assert core["us"] == 19.4  # the middle one of the three measured
    results = {**_results({}, {}), "core_cpu": core}
    assert "(30.1, 18.2, 19.4 µs)" in _target(results, CORE_CPU)["note"]
    text = "\n".join(core_cpu_section(results))
    for when in ("before", "middle", "after"):
        assert f"| {when} |" in text
    assert "exit 1: boom" in text
    nothing = merge_core_cpu([failed])
    assert (
        "us" not in nothing and _target({**results, "core_cpu": nothing}, CORE_CPU)["met"] is None
    )


def test_a_core_cpu_figure_from_one_process_still_reads() -> None:
    # Results written before the figure came from several processes (latest.json).
    from benchmarks._report import core_cpu_section

    core = {"us": 18.4, "rounds_us": [18.4] * 9, "turns_per_round": 1000, "goal_us": 16}
    results = {**_results({}, {}), "core_cpu": core}
    assert _target(results, CORE_CPU)["measured"] == 18.4
    assert any("| one process |" in line for line in core_cpu_section(results))


def test_without_the_core_cpu_figure_its_target_is_not_measured() -> None:
    from benchmarks._report import core_cpu_section

    assert _target(_results({}, {}), CORE_CPU)["met"] is None
    assert core_cpu_section(_results({}, {})) == []

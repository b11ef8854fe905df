"""The benchmark report marks a missed target *out of reach* exactly when the floor
writing our rows (no code of ours around the statements) is itself below the target.

Pure report logic over a results dict shaped like ``benchmarks/results/latest.json``:
no benchmark runs here, and no speed is judged.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks._report import check_targets, targets_table

PG_FLOOR = "PostgreSQL commit-per-turn vs raw one-statement floor"
SQLITE_SDK = "SQLite commit-per-turn vs SDK SQLiteSession"
SQLITE_RAW = "SQLite commit-per-turn vs raw sqlite3 floor (blocks the event loop)"


def _results(sqlite: dict[str, int], postgres: dict[str, int]) -> dict[str, Any]:
    def cells(rates: dict[str, int]) -> dict[str, Any]:
        return {key: {"turns_per_s": rate} for key, rate in rates.items()}

    return {"commit_per_turn": {"sqlite": cells(sqlite), "postgres": cells(postgres)}}


def _target(results: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [t for t in check_targets(results) if t["target"] == name]
    return found


def test_a_target_the_same_rows_floor_itself_misses_is_out_of_reach() -> None:
    # ours 0.70x the bare floor; the floor writing our rows 0.80x: below 0.9 too.
    results = _results({}, {"ours_pg": 700, "raw_asyncpg": 1000, "raw_asyncpg_same": 800})
    target = _target(results, PG_FLOOR)
    assert target["met"] is False
    assert target["gap"] == "missed by 22%; out of reach"
    assert target["out_of_reach"] == "the one-statement floor writing our rows itself reaches 0.80x"
    assert "one-statement floor, our rows 0.80x" in target["ceiling"]
    row = next(line for line in targets_table(results) if line.startswith(f"| {PG_FLOOR} |"))
    assert "out of reach" in row and "0.80x" in row


@pytest.mark.parametrize("same_rows", [950, 900])  # 0.95x and exactly 0.9x: reachable
def test_a_target_the_same_rows_floor_meets_is_only_missed(same_rows: int) -> None:
    results = _results({}, {"ours_pg": 700, "raw_asyncpg": 1000, "raw_asyncpg_same": same_rows})
    target = _target(results, PG_FLOOR)
    assert target["met"] is False
    assert target["gap"] == "missed by 22%"
    assert target["out_of_reach"] == ""


def test_without_the_same_rows_floor_nothing_is_called_out_of_reach() -> None:
    target = _target(_results({}, {"ours_pg": 700, "raw_asyncpg": 1000}), PG_FLOOR)
    assert target["gap"] == "missed by 22%" and target["out_of_reach"] == ""


def test_the_sqlite_targets_are_judged_against_the_one_hop_floor_writing_our_rows() -> None:
    sqlite = {
        "ours_sqlite": 2600,
        "raw_aiosqlite_1hop_same": 3400,  # 0.49x raw sqlite3, 1.24x SQLiteSession
        "raw_aiosqlite_1hop": 4350,
        "raw_sqlite3_same": 5000,
        "raw_sqlite3": 7000,
        "sdk_sqlite": 2750,
    }
    results = _results(sqlite, {})
    raw = _target(results, SQLITE_RAW)
    assert raw["out_of_reach"] == "the 1-hop floor writing our rows itself reaches 0.49x"
    assert raw["gap"].endswith("; out of reach")
    assert "raw sqlite3, our rows 0.71x" in raw["ceiling"]
    sdk = _target(results, SQLITE_SDK)
    assert sdk["met"] is False and sdk["out_of_reach"] == ""
    assert "1-hop floor, our rows 1.24x" in sdk["ceiling"]


CORE_CPU = "core CPU per commit (µs)"


@pytest.mark.parametrize(("us", "met"), [(15.2, True), (16.0, True), (17.6, False)])
def test_the_core_cpu_per_commit_is_a_target_of_its_own(us: float, met: bool) -> None:
    from benchmarks._report import core_cpu_section

    core = {"us": us, "rounds_us": [us] * 3, "turns_per_round": 1000, "goal_us": 16}
    results = {**_results({}, {}), "core_cpu": core}
    target = _target(results, CORE_CPU)
    assert target["required"] == "<= 16" and target["met"] is met
    assert target["note"] == "median of 3 rounds, CPU time"
    assert any(f"{us:.1f} µs" in line for line in core_cpu_section(results))


def test_without_the_core_cpu_figure_its_target_is_not_measured() -> None:
    from benchmarks._report import core_cpu_section

    assert _target(_results({}, {}), CORE_CPU)["met"] is None
    assert core_cpu_section(_results({}, {})) == []

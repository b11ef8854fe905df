"""The benchmarks still work: ``python -m benchmarks --quick`` runs end to end.

This proves the harness, not the speed: every workload runs against this package, the
SDK's own sessions and the raw-driver floors; every subject really stored and read
back what it was given (the benchmark verifies that itself); our sessions had no
failed commit under concurrency and retained no ``Agent`` after ``Runner.run``; and
the markdown, JSON and PNG results are written. No figure is compared to a speed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import IN_CI, PG_DSN, postgres_problem

ROOT = Path(__file__).resolve().parents[2]

SQLITE_SUBJECTS = {
    "ours_sqlite",
    "raw_sqlite3",
    "raw_aiosqlite",
    "raw_aiosqlite_1hop",
    "sdk_sqlite",
    "sdk_async_sqlite",
    "sdk_sqlalchemy_sqlite",
}
POSTGRES_SUBJECTS = {"ours_pg", "raw_asyncpg", "sdk_sqlalchemy_pg"}
# Floors writing our rows by hand: in the commit workloads (a)-(c) only.
SAME_WORK = {
    "sqlite": {"raw_sqlite3_same", "raw_aiosqlite_1hop_same"},
    "postgres": {"raw_asyncpg_same"},
}
OURS = {"sqlite": "ours_sqlite", "postgres": "ours_pg"}


def _finite_positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.timeout(300)
def test_quick_benchmark_runs_every_workload(tmp_path: Path) -> None:
    backends = ["sqlite", "postgres"]
    extra: list[str] = ["--require-postgres"]
    if postgres_problem() is not None and not IN_CI:
        backends, extra = ["sqlite"], []
    env = dict(os.environ, SESSIONS_BENCH_POSTGRES_DSN=PG_DSN)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path), "--backends"]
        + backends
        + extra,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-4000:]}"

    results = json.loads((tmp_path / "quick.json").read_text(encoding="utf-8"))
    assert results["meta"]["quick"] is True
    assert results["failures"] == [], results["failures"]
    expected = {"sqlite": SQLITE_SUBJECTS, "postgres": POSTGRES_SUBJECTS}

    for backend in backends:
        readers = expected[backend]
        subjects = readers | SAME_WORK[backend]
        ours = OURS[backend]

        # Durability read back from every subject's own connections, and the same for all
        # of them (otherwise the ratios would compare different guarantees).
        durability = results["durability"][backend]
        assert set(durability) == subjects, sorted(durability)
        assert all("error" not in d for d in durability.values()), durability
        names = (
            ("journal_mode", "synchronous")
            if backend == "sqlite"
            else ("synchronous_commit", "fsync")
        )
        for name in names:
            assert len({d[name] for d in durability.values()}) == 1, (name, durability)
        if backend == "sqlite":
            assert durability[ours]["journal_mode"] == "WAL", durability[ours]

        for workload, metric in (
            ("commit_per_turn", "turns_per_s"),
            ("buffered_run", "runs_per_s"),
        ):
            got = results[workload][backend]
            assert set(got) == subjects, (workload, backend, sorted(got))
            for key, entry in got.items():
                assert _finite_positive(entry[metric]), (workload, key, entry)
                # the benchmark read every subject's session back: nothing lost or extra
                assert entry["verified"] is True, (workload, key, entry)

        conc = results["concurrency"][backend]
        assert set(conc) == subjects
        for key, entry in conc.items():
            for level, cell in entry["levels"].items():
                assert "error" not in cell, (key, level, cell)
                if "skipped" in cell:
                    continue
                assert cell["turns"] + cell["errors"] >= 1, (key, level, cell)
        for level, cell in conc[ours]["levels"].items():
            assert cell["errors"] == 0 and not cell["timed_out"], (level, cell)
            assert cell["turns"] == cell["attempted"], (level, cell)
            # every commit (timed and warm-up) has its batch record, in >= 1 transaction
            assert cell["batches"] == cell["attempted"] + int(level), (level, cell)
            assert 1 <= cell["transactions"] <= cell["batches"], (level, cell)

        for part in ("history", "sessions"):
            data = results[part][backend]
            assert set(data) == readers, (part, backend, sorted(data))
            for key, entry in data.items():
                assert entry["sizes"], (part, key)
                for size, cell in entry["sizes"].items():
                    assert _finite_positive(cell["limit20_ms"]), (part, key, size, cell)
                    assert _finite_positive(cell["full_ms"]), (part, key, size, cell)
                    assert cell["limit20_returned"] == 20, (part, key, size, cell)
                    assert cell["full_returned"] == cell["expected_full"], (part, key, size, cell)
        for size, cell in results["history"][backend][ours]["sizes"].items():
            ops = cell["turn_ops"]  # our turn operations, on a session of 20-item turns
            assert ops["turn_count"] == ops["turns_returned"] == int(size) // 20, (size, ops)
            assert ops["turns5_returned"] == 100, (size, ops)
            for key in ("turns_ms", "turns5_ms", "rewind2_undo_ms", "fork2_ms", "usage_ms"):
                assert _finite_positive(ops[key]), (backend, size, key, ops)

        memory = results["memory"][backend]
        assert "error" not in memory, memory
        assert memory["agent"]["runs"] >= 1
        assert memory["agent"]["agents_alive"] == 0, memory["agent"]
        agent = memory["agent"]
        assert agent["items_in_last_session"] == agent["expected_items_in_last_session"], agent

        steps = results["breakdown"][backend]
        assert f"ours_{'sqlite' if backend == 'sqlite' else 'pg'}" in steps
        assert all(_finite_positive(step["us"]) for step in steps.values()), steps

        _check_peers(results, backend)

    names = {t["target"] for t in results["targets"]}
    assert "SQLite commit-per-turn vs 1-hop aiosqlite floor, our rows (guard)" in names
    assert "PostgreSQL 100 sessions vs raw one-statement floor (same pool)" in names
    assert "SQLite get_items(turns=5): largest / smallest history" in names

    text = (tmp_path / "quick.md").read_text(encoding="utf-8")
    assert "QUICK run" in text and "## Targets" in text and "## Durability" in text
    assert "(a) SQLite: one session, commit per turn" in text
    assert "(g) Peers" in text
    assert any(name.startswith("ours ahead of SDK SQLAlchemySession") for name in names)
    for png in (
        "throughput_vs_concurrency.png",
        "read_latency_vs_history.png",
        "peers_throughput.png",
    ):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


# The SDK's sessions ship with openai-agents: (g) always measures them. LangGraph and
# ADK come with the bench-peers extra, which the test virtualenv may lack.
ALWAYS_PEERS = {
    "sqlite": {"ours_sqlite", "sdk_sqlalchemy_sqlite", "sdk_advanced_sqlite"},
    "postgres": {"ours_pg", "sdk_sqlalchemy_pg"},
}
OPTIONAL_PEERS = {
    "sqlite": {"langgraph_sqlite", "adk_sqlite"},
    "postgres": {"langgraph_pg", "adk_pg"},
}


def _check_peers(results: dict[str, object], backend: str) -> None:
    """(g): every subject measured (or reported not installed), verified, its settings
    read back and the same as ours."""
    data = results["peers"][backend]  # type: ignore[index]
    assert set(data) == ALWAYS_PEERS[backend] | OPTIONAL_PEERS[backend], sorted(data)
    measured = [key for key, entry in data.items() if "missing" not in entry]
    assert ALWAYS_PEERS[backend] <= set(measured), data
    for key, entry in data.items():
        if "missing" in entry:
            assert key in OPTIONAL_PEERS[backend]
            assert entry["missing"].startswith("not installed"), entry
            assert not entry["levels"], entry
            continue
        assert "error" not in entry, (key, entry)
        assert entry["version"] != "not installed", entry
        levels = entry["levels"]
        assert set(levels) == {str(n) for n in results["peers"]["levels"]}, (key, levels)  # type: ignore[index]
        for level, cell in levels.items():
            # the session read back holds 4 items per turn; every history read was whole
            assert cell["verified"] is True, (key, level, cell)
            assert cell["read_mismatches"] == 0, (key, level, cell)
            assert _finite_positive(cell["turns_per_s"]), (key, level, cell)
            assert cell["sessions_checked"] >= 1, (key, level, cell)
            if key == OURS[backend]:
                assert cell["errors"] == 0 and cell["turns"] == cell["attempted"], cell
    names = ("journal_mode", "synchronous") if backend == "sqlite" else ("synchronous_commit",)
    ours = data[OURS[backend]]["durability"]
    for key in measured:
        durability = data[key]["durability"]
        assert "error" not in durability, (key, durability)
        for name in names:
            assert durability[name] == ours[name], (key, name, durability, ours)

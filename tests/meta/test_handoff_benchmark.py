"""``python -m benchmarks.handoff --quick`` runs end to end and writes its results.

This proves the harness, not the speed: every turn of both subjects was cut at its six
instants in order (no phase is negative, the phases fit in the turn), and the wrappers
it puts around the library's internals are gone afterwards. No figure is compared to a
speed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks.handoff import PHASES
from tests.helpers import run_benchmark


@pytest.mark.timeout(120)
def test_the_handoff_benchmark_writes_every_phase_of_both_subjects(tmp_path: Path) -> None:
    report = run_benchmark("handoff", tmp_path)
    assert set(report["results"]) == {"ours", "floor"}
    for figures in report["results"].values():
        phases = figures["phases_us"]
        assert list(phases) == list(PHASES)
        for rounds in figures["rounds_us"].values():
            assert len(rounds) == report["rounds"]
            assert min(rounds) >= 0
        parts = sum(v for k, v in phases.items() if k != "total")
        assert phases["transaction"] > 0
        assert parts <= phases["total"] * 1.5  # medians of parts, not an exact sum
        assert figures["main_thread_cpu_us"] > 0
    assert "ours − floor" in (tmp_path / "handoff.md").read_text()


def test_the_handoff_benchmark_puts_the_library_internals_back() -> None:
    import tempfile

    import sessions.sqlite as sqlite_module
    import sessions.sqlite.group as group_module
    import sessions.sqlite.worker as worker_module
    from benchmarks.handoff import _measure

    submit, apply_group = worker_module.Worker.submit, group_module.apply_group
    apply = sqlite_module.SQLiteBackend.apply
    with tempfile.TemporaryDirectory() as directory:
        results = asyncio.run(_measure(5, 1, directory))
    assert results["ours"]["phases_us"]["transaction"] > 0
    assert worker_module.Worker.submit is submit
    assert group_module.apply_group is apply_group
    assert sqlite_module.SQLiteBackend.apply is apply

"""``python -m benchmarks.integrity --quick`` runs end to end and writes its results.

This proves the harness, not the speed: both modes ran every workload and the ratio
is recorded. No figure is compared to a speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_benchmark


@pytest.mark.timeout(120)
def test_the_integrity_benchmark_writes_both_modes_and_their_ratio(tmp_path: Path) -> None:
    report = run_benchmark("integrity", tmp_path, "--backends", "core", "sqlite")
    assert set(report["results"]) == {"core", "sqlite"}
    assert set(report["results"]["sqlite"]) == {"transaction", "autocommit", "read"}
    for workloads in report["results"].values():
        for figures in workloads.values():
            assert set(figures["per_second"]) == {"off", "quarantine"}
            assert figures["ratio_default_to_off"] > 0
    assert "default / off" in (tmp_path / "integrity.md").read_text()

"""``python -m benchmarks.integrity --quick`` runs end to end and writes its results.

This proves the harness, not the speed: both modes ran every workload and the ratio
is recorded. No figure is compared to a speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_the_integrity_benchmark_writes_both_modes_and_their_ratio(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.integrity", "--quick", "--out", str(tmp_path)]
        + ["--backends", "core", "sqlite"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "integrity.json").read_text())
    assert set(report["results"]) == {"core", "sqlite"}
    assert set(report["results"]["sqlite"]) == {"transaction", "autocommit", "read"}
    for workloads in report["results"].values():
        for figures in workloads.values():
            assert set(figures["per_second"]) == {"off", "quarantine"}
            assert figures["ratio_default_to_off"] > 0
    assert "default / off" in (tmp_path / "integrity.md").read_text()

"""Cancel every operation at every suspension point; the contract must hold each time."""

from __future__ import annotations

import pytest

from tests.conftest import Target

from .cancellation import SCENARIOS, run_sweep

# A sweep that finds fewer interruption points than this did not really sweep.
MIN_POINTS = {
    "commit": 6,
    "autocommit add_items": 6,
    "autocommit pop_item": 9,
    "pop_item (staged)": 6,
    "autocommit clear_session": 6,
    "clear_session (staged)": 1,
    "get_items": 6,
    "get_items after unknown outcome": 9,
    "commit after unknown outcome": 6,
}


async def test_cancellation_sweep(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    results = await run_sweep(target)
    report = []
    failures = []
    for name in SCENARIOS:
        tries, problems = results[name]
        report.append(
            f"{target.kind:8} {name:34} interruptions={tries:4} violations={len(problems)}"
        )
        if tries < MIN_POINTS[name]:
            failures.append(f"{name}: only {tries} interruption points found")
        failures += [f"{name}: {p}" for p in problems[:20]]
    with capsys.disabled():
        print("\n" + "\n".join(report))
    assert not failures, "\n".join(failures)

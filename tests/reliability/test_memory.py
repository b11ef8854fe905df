"""Thousands of agent turns must not retain Agents or RunResults, nor grow memory."""

from __future__ import annotations

import pytest

from tests.conftest import Target

from .memory import run_turns


async def test_many_turns_retain_nothing_and_memory_stays_flat(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = await run_turns(target, turns=300, warmup=100)
    with capsys.disabled():
        print(
            f"\n{target.kind}: {figures.turns} turns after warm-up: growth {figures.growth_bytes} B "
            f"({figures.per_turn_bytes:.1f} B/turn; ours {figures.ours_bytes} B), "
            f"retained agents {figures.retained_agents}, "
            f"results {figures.retained_results}"
        )
    assert not figures.problems, "\n".join(figures.problems)

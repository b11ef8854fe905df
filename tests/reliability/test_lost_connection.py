"""PostgreSQL: connections lost mid-commit (no server restart here: that is the soak's)."""

from __future__ import annotations

import pytest

from tests.conftest import Target
from tests.helpers import shown_and_clean

from .lost_connection import give_up_scenarios, lost_ack_scenario, terminate_storm, terminate_sweep


async def test_terminate_backend_at_each_commit_phase(pg: Target) -> None:
    tries, problems, interrupted = await terminate_sweep(pg)
    assert tries == 6
    assert not problems, "\n".join(problems)
    # At least the two commits blocked in the server ("during") lost their connection.
    assert interrupted >= 2


async def test_terminate_storm_loses_and_duplicates_nothing(
    pg: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    count, problems, figures = await terminate_storm(pg, writers=4, batches=15)
    shown_and_clean(
        capsys,
        f"postgres: {count} batches committed under pg_terminate_backend: {figures}",
        problems,
    )
    assert figures["backends terminated"] > 0
    assert figures["commit attempts interrupted"] > 0, "no termination hit a commit in flight"


async def test_lost_acknowledgement_is_not_duplicated(pg: Target) -> None:
    _, problems = await lost_ack_scenario(pg, rounds=6)
    assert not problems, "\n".join(problems)


async def test_retries_exhausted_commit_error_is_accurate_and_keeps_changes(pg: Target) -> None:
    _, problems = await give_up_scenarios(pg)
    assert not problems, "\n".join(problems)

"""Real processes: SIGKILL mid-commit, many writers, many poppers, fresh-database races."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Target
from tests.helpers import shown_and_clean
from tests.provision import PROVISIONS

from .processes import concurrent_first_use, concurrent_poppers, concurrent_writers, crash_scenario

KILLS = 20


async def test_sigkill_mid_commit(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    """A child commits in a loop and is SIGKILLed at random moments, KILLS times.

    After every kill: SQLite's integrity check passes, every batch the child reported
    committed is stored whole and in order, and no partial batch exists.
    """
    kills, problems, figures = await crash_scenario(target, KILLS)
    shown_and_clean(capsys, f"{target.kind}: {kills} kills, {figures}", problems)
    assert figures["batches confirmed"] > 0, "the child never committed: the kills tested nothing"


async def test_many_processes_many_tasks(target: Target) -> None:
    """3 processes x 4 tasks commit to one shared session and to sessions of their own."""
    _, problems = await concurrent_writers(target, procs=3, tasks=4, batches=6)
    assert not problems, "\n".join(problems[:20])


async def test_concurrent_autocommit_pop_each_item_once(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    """3 processes pop one session empty: every item is returned exactly once."""
    items, problems, figures = await concurrent_poppers(target, procs=3, items=60)
    shown_and_clean(
        capsys, f"{target.kind}: {items} items popped by 3 processes: {figures}", problems
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_concurrent_first_use_of_fresh_database(kind: str, tmp_path: Any) -> None:
    """6 processes open a database/schema that does not exist yet at the same moment."""
    PROVISIONS[kind].require()
    _, problems = await concurrent_first_use(kind, procs=6, directory=str(tmp_path))
    assert not problems, "\n".join(problems[:20])

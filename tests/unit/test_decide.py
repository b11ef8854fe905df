"""``sessions._model.decide.decide``: every branch of what a batch means, without a database.

The backends' behaviour is pinned by ``tests/contract`` and ``tests/model``; here the
pure function they all call is checked on its own, condition by condition and in the
order the conditions are judged.
"""

from __future__ import annotations

from typing import Any

import pytest

from sessions import MemoryBackend
from sessions._model.backend import Batch, BranchRecord, RewindChange, RunStateChange
from sessions._model.decide import Plan, Snapshot, decide, key_limit, needs_snapshot, undoes
from sessions.errors import ConflictError, DeletedConflictError, VersionConflictError

SID = "s1"


def batch(**fields: Any) -> Batch:
    base: dict[str, Any] = {"batch_id": "b1", "clear": False, "pops": (), "items": ()}
    return Batch(**{**base, **fields})


UNDO = RewindChange(None)
FORK = BranchRecord("src", 2)


def test_needs_snapshot_only_for_pops_or_a_condition() -> None:
    assert not needs_snapshot(batch(items=("x",)))
    assert not needs_snapshot(batch(clear=True, incarnation="life"))
    assert needs_snapshot(batch(pops=(1,)))
    assert needs_snapshot(batch(tail=3))
    assert needs_snapshot(batch(expect_version=0))
    assert needs_snapshot(batch(rewind=UNDO))


def test_key_limit_is_one_more_than_the_distinct_pops() -> None:
    assert key_limit(batch()) == 1
    assert key_limit(batch(pops=(3, 3, 4))) == 3


def test_a_plain_batch_advances_the_version() -> None:
    assert decide(SID, batch(items=("x",)), Snapshot(version=4)) == Plan(5)


def test_an_applied_batch_is_skipped_before_any_condition() -> None:
    doomed = batch(incarnation="old", expect_version=9, pops=(1,), tail=0)
    assert decide(SID, doomed, Snapshot(applied=True, life="new")) is None


@pytest.mark.parametrize("life", [None, "other"])
def test_another_life_is_a_deleted_conflict(life: str | None) -> None:
    with pytest.raises(DeletedConflictError, match="was deleted"):
        decide(SID, batch(incarnation="mine", expect_version=1), Snapshot(life=life))


def test_the_same_life_or_none_expected_passes() -> None:
    assert decide(SID, batch(incarnation="mine"), Snapshot(life="mine")) == Plan(1)
    assert decide(SID, batch(), Snapshot(life="other")) == Plan(1)


def test_the_life_is_judged_before_an_empty_undo_is_skipped() -> None:
    with pytest.raises(DeletedConflictError):
        decide(SID, batch(incarnation="mine", rewind=UNDO), Snapshot(life="other"))


def test_an_undo_with_nothing_hidden_is_skipped_before_other_conditions() -> None:
    assert decide(SID, batch(rewind=UNDO, expect_version=7), Snapshot()) is None


def test_pops_no_longer_stored_conflict_before_the_version() -> None:
    b = batch(pops=(1, 2, 3), expect_version=5)
    with pytest.raises(ConflictError, match="2 of 3 popped item") as caught:
        decide(SID, b, Snapshot(version=1, pops_stored=1))
    assert type(caught.value) is ConflictError


def test_duplicate_pops_count_as_missing() -> None:
    with pytest.raises(ConflictError, match="1 of 2 popped"):
        decide(SID, batch(pops=(4, 4)), Snapshot(pops_stored=1))


def test_a_clear_ignores_its_pops() -> None:
    assert decide(SID, batch(clear=True, pops=(1,)), Snapshot()) == Plan(1)


def test_all_pops_stored_pass() -> None:
    assert decide(SID, batch(pops=(1, 2)), Snapshot(pops_stored=2, version=2)) == Plan(3)


def test_expect_version_must_be_the_stored_version() -> None:
    with pytest.raises(VersionConflictError, match="at version 3, not 2") as caught:
        decide(SID, batch(expect_version=2, tail=0), Snapshot(version=3, after_tail=(9,)))
    assert (caught.value.expected, caught.value.actual) == (2, 3)
    assert decide(SID, batch(expect_version=3), Snapshot(version=3)) == Plan(4)


def test_an_item_stored_after_the_tail_is_a_conflict_before_the_run_state() -> None:
    b = batch(tail=5, run_state=RunStateChange("x", expect_version=1))
    with pytest.raises(ConflictError, match="stored after the end"):
        decide(SID, b, Snapshot(after_tail=(6,), run_state_version=2))


def test_items_after_the_tail_that_the_batch_pops_or_clears_are_no_conflict() -> None:
    assert decide(SID, batch(tail=5, pops=(6,)), Snapshot(pops_stored=1, after_tail=(6,)))
    assert decide(SID, batch(tail=5, clear=True), Snapshot(after_tail=(6, 7)))
    b = batch(tail=5, pops=(6,))
    with pytest.raises(ConflictError, match="stored after the end"):
        decide(SID, b, Snapshot(pops_stored=1, after_tail=(6, 7)))


def test_the_run_state_is_compared_and_set() -> None:
    b = batch(run_state=RunStateChange("x", expect_version=1))
    with pytest.raises(ConflictError, match="run state is at version 2, not 1"):
        decide(SID, b, Snapshot(run_state_version=2))
    assert decide(SID, b, Snapshot(run_state_version=1)) == Plan(1, run_state_version=2)
    free = batch(run_state=RunStateChange(None))
    assert decide(SID, free, Snapshot(run_state_version=7)) == Plan(1, run_state_version=8)


def test_the_run_state_is_judged_before_the_fork_target() -> None:
    b = batch(run_state=RunStateChange("x", expect_version=0), branch=FORK)
    with pytest.raises(ConflictError, match="run state"):
        decide(SID, b, Snapshot(run_state_version=1, fork_of=("a", 1)))


@pytest.mark.parametrize(
    ("snapshot", "reason"),
    [
        (Snapshot(fork_of=("a", 1), newest_rewind=1, stored=(1,)), "already a fork of session 'a'"),
        (Snapshot(newest_rewind=1, stored=(1,)), "hidden \\(rewound\\) turns"),
        (Snapshot(stored=(1,)), "already holds items"),
    ],
)
def test_a_fork_target_must_be_fresh(snapshot: Snapshot, reason: str) -> None:
    with pytest.raises(ConflictError, match=f"fork of session 'src' at turn 2 .*{reason}"):
        decide(SID, batch(branch=FORK), snapshot)


def test_a_fresh_or_cleared_fork_target_passes() -> None:
    assert decide(SID, batch(branch=FORK, items=("x",)), Snapshot()) == Plan(1)
    cleared = Snapshot(newest_rewind=2, stored=(1, 2))
    assert decide(SID, batch(branch=FORK, clear=True), cleared) == Plan(1)
    popped = Snapshot(pops_stored=1, stored=(1,))
    assert decide(SID, batch(branch=FORK, pops=(1,)), popped) == Plan(1)


def test_a_rewind_hides_under_the_next_number() -> None:
    hide = batch(rewind=RewindChange(3))
    assert decide(SID, hide, Snapshot()) == Plan(1, hide_as=1)
    assert decide(SID, hide, Snapshot(newest_rewind=4)) == Plan(1, hide_as=5)
    assert decide(SID, batch(rewind=RewindChange(3), clear=True), Snapshot(newest_rewind=4)) == (
        Plan(1, hide_as=1)
    )


def test_an_undo_brings_back_the_newest_rewind() -> None:
    assert decide(SID, batch(rewind=UNDO), Snapshot(newest_rewind=2)) == Plan(1, bring_back=2)


def test_an_undo_is_blocked_by_items_stored_after_the_hidden_ones() -> None:
    with pytest.raises(ConflictError, match="undoing the rewind would interleave"):
        decide(SID, batch(rewind=UNDO), Snapshot(newest_rewind=2, after_hidden=(9,)))
    with pytest.raises(ConflictError, match="undoing the rewind would interleave"):
        decide(SID, batch(rewind=UNDO, items=("x",)), Snapshot(newest_rewind=2))
    popped = Snapshot(newest_rewind=2, pops_stored=1, after_hidden=(9,))
    assert decide(SID, batch(rewind=UNDO, pops=(9,)), popped) == Plan(1, bring_back=2)


def test_an_undo_with_a_clear_brings_nothing_back() -> None:
    cleared = Snapshot(newest_rewind=2, after_hidden=(9,))
    assert decide(SID, batch(rewind=UNDO, clear=True), cleared) == Plan(1)


def test_undoes_names_an_undo_only() -> None:

    assert undoes(batch(rewind=UNDO))
    assert not undoes(batch(rewind=RewindChange(0)))
    assert not undoes(batch())


async def test_the_memory_backend_ignores_the_pops_of_a_batch_that_clears() -> None:
    backend = MemoryBackend()
    await backend.apply(SID, [batch(items=('"a"',))])
    await backend.apply(SID, [batch(batch_id="b2", clear=True, pops=(1,), items=('"b"',))])
    assert await backend.load(SID, None) == [(2, '"b"')]


async def test_the_memory_backend_refuses_a_batch_popping_one_key_twice() -> None:
    backend = MemoryBackend()
    await backend.apply(SID, [batch(items=('"a"', '"b"'))])
    with pytest.raises(ConflictError, match="1 of 2 popped"):
        await backend.apply(SID, [batch(batch_id="b2", pops=(1, 1))])
    assert await backend.load(SID, None) == [(1, '"a"'), (2, '"b"')]

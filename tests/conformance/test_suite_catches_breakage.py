"""The suite can fail: every capability has a mutant that breaks it and is caught, and
detection reports what a subject does not offer instead of failing it."""

from __future__ import annotations

from typing import Any

import pytest

from sessions import MemoryBackend
from sessions.testing import (
    BASE_CAPABILITIES,
    Capability,
    Outcome,
    Report,
    Spawn,
    Subject,
    run_conformance,
)
from sessions.testing._checks.base import batch_items, verify_batches
from sessions.testing._spec import ConformanceFailure
from tests.conformance import mutants

C = Capability


def failed(report: Report) -> dict[Capability, str]:
    """Each failed capability and the name of its first failing check."""
    out: dict[Capability, str] = {}
    for result in report.failures():
        assert result.first_failure is not None
        out[result.capability] = result.first_failure.name
    return out


async def test_a_correct_plain_session_passes_the_base_and_offers_nothing_more() -> None:
    report = await run_conformance(mutants.list_subject())
    expected = {
        cap: Outcome.PASSED if cap in BASE_CAPABILITIES else Outcome.NOT_OFFERED for cap in C
    }
    assert report.outcomes() == expected, report.render()
    assert report.ok
    reason = report.results[C.BUFFERED].reason
    assert reason is not None and "ListSession has no commit()" in reason


@pytest.mark.parametrize(
    ("mutant", "capability", "first_failing_check"),
    [
        (mutants.LimitFromTheStart, C.LIMIT, "limit_returns_latest_n_in_order"),
        (mutants.PopsTheOldest, C.POP, "pop_returns_the_newest_item_and_removes_it"),
        (mutants.ClearsEverySession, C.CLEAR, "clear_leaves_other_sessions_alone"),
        (mutants.KeepsTheCallersDicts, C.ITEMS, "add_items_snapshots_at_call_time"),
        (mutants.InterleavesItems, C.ORDERING, "concurrent_writers_keep_batches_contiguous"),
    ],
)
async def test_a_broken_protocol_method_fails_its_base_capability(
    mutant: type[mutants.ListSession], capability: Capability, first_failing_check: str
) -> None:
    report = await run_conformance(mutants.list_subject(mutant), capabilities=BASE_CAPABILITIES)
    assert failed(report) == {capability: first_failing_check}, report.render()
    with pytest.raises(AssertionError, match=first_failing_check):
        report.raise_for_failures()


async def test_a_session_that_writes_through_fails_buffering_and_staged_pops() -> None:
    report = await run_conformance(mutants.list_subject(mutants.WritesThrough))
    assert failed(report) == {
        C.BUFFERED: "writes_stay_local_until_commit",
        C.STAGED_POPS: "staged_pop_removes_the_tail",
    }, report.render()
    # It has no hooks to hold a write, and no Backend under it:
    assert report.outcomes()[C.SHIELDED_COMMIT] is Outcome.NOT_CHECKED
    assert report.outcomes()[C.ATOMIC_BATCH] is Outcome.NOT_OFFERED


async def test_an_unshielded_commit_fails_the_shielded_capability() -> None:
    report = await run_conformance(mutants.unshielded_subject())
    assert failed(report) == {C.SHIELDED_COMMIT: "commit_is_shielded_from_cancellation"}, (
        report.render()
    )
    detail = report.results[C.SHIELDED_COMMIT].checks[0].detail
    assert detail is not None and "returned before its outcome was known" in detail


@pytest.mark.parametrize(
    ("backend", "capability", "first_failing_check"),
    [
        (
            mutants.NonAtomicBackend(),
            C.ATOMIC_BATCH,
            "apply_of_several_batches_is_all_or_nothing",
        ),
        (
            mutants.ForgetfulBackend(),
            C.IDEMPOTENT_RETRY,
            "backend_skips_a_batch_it_already_applied",
        ),
    ],
)
async def test_a_backend_breaking_its_flag_fails_that_capability(
    backend: MemoryBackend, capability: Capability, first_failing_check: str
) -> None:
    report = await run_conformance(mutants.backend_subject(backend))
    assert failed(report) == {capability: first_failing_check}, report.render()


async def test_a_forgetful_backend_duplicates_a_retried_commit_and_is_caught() -> None:
    report = await run_conformance(
        mutants.backend_subject(mutants.ForgetfulBackend()), capabilities=[C.IDEMPOTENT_RETRY]
    )
    names = [c.name for c in report.results[C.IDEMPOTENT_RETRY].checks if c.passed is False]
    assert names == [
        "backend_skips_a_batch_it_already_applied",
        "commit_retried_after_an_unknown_outcome_applies_once",
        "unknown_outcome_is_resolved_before_reads",
    ], report.render()


async def test_a_backend_declaring_no_atomicity_is_not_offered_it() -> None:
    report = await run_conformance(mutants.backend_subject(mutants.HonestNonAtomicBackend()))
    assert report.ok, report.render()
    for cap, flag in ((C.ATOMIC_BATCH, "atomic"), (C.IDEMPOTENT_RETRY, "idempotent")):
        assert report.outcomes()[cap] is Outcome.NOT_OFFERED
        assert report.results[cap].reason == f"MemorySession's backend declares {flag}=False"


async def test_checks_needing_hooks_are_reported_not_checked_without_them() -> None:
    subject = mutants.without_hooks(mutants.backend_subject(MemoryBackend()))
    report = await run_conformance(subject)
    assert report.ok, report.render()
    assert report.outcomes()[C.SHIELDED_COMMIT] is Outcome.NOT_CHECKED
    idempotent = report.results[C.IDEMPOTENT_RETRY]
    assert idempotent.outcome is Outcome.PASSED
    assert [c.passed for c in idempotent.checks] == [True, None, None]


async def test_a_child_process_that_fails_fails_cross_process_ordering() -> None:
    report = await run_conformance(mutants.spawning_subject(), capabilities=[C.CROSS_PROCESS])
    result = report.results[C.CROSS_PROCESS]
    assert result.outcome is Outcome.FAILED
    assert result.first_failure is not None and result.first_failure.error is not None
    assert "cannot be opened in another process" in result.first_failure.error


def _stored(*batches: tuple[int, int]) -> list[Any]:
    return [item for w, b in batches for item in batch_items(w, b, 2)]


_A, _B = batch_items(0, 0, 2), batch_items(1, 0, 2)


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        (_stored((0, 0), (1, 0), (0, 1)), "number of items stored: expected 8, got 6"),
        (_stored((0, 0), (0, 0), (1, 0), (1, 1)), "batch 0 stored where batch 1 was due"),
        (_stored((0, 1), (0, 0), (1, 0), (1, 1)), "batch 1 stored where batch 0 was due"),
        ([_A[0], _B[0], _A[1], _B[1], *_stored((0, 1), (1, 1))], "items 0..1"),
    ],
    ids=["lost", "duplicated", "out of order", "torn"],
)
def test_the_batch_verifier_catches_every_kind_of_damage(items: list[Any], problem: str) -> None:
    with pytest.raises(ConformanceFailure, match=problem):
        verify_batches(items, writers=2, batches=2, size=2)


def test_the_batch_verifier_accepts_whole_ordered_batches() -> None:
    verify_batches(_stored((1, 0), (0, 0), (0, 1), (1, 1)), writers=2, batches=2, size=2)


async def test_bad_subjects_are_refused_with_a_clear_error() -> None:
    async def sessions(session_id: str) -> Any:
        yield session_id

    with pytest.raises(ValueError, match="non-empty"):
        Subject("", sessions)
    with pytest.raises(ValueError, match="module:function"):
        Spawn("no_colon")
    with pytest.raises(TypeError, match="run_conformance"):
        await run_conformance("not a subject")  # type: ignore[arg-type]

"""Integrity at commit (``integrity=``), on every backend: a commit never stores history
the Responses API would refuse (``docs/history.md``).

Parametrized over SQLite and PostgreSQL (``store`` / ``target``); the memory backend and
the wrapper where the docs promise it. One test per written rule at commit, the three
modes, the quarantine's storage, limited reads and the compaction hook.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from sessions import MemoryStore, RetryPolicy, Store, TransactionalSession, open_store
from sessions._model.history import CALL_OUTPUT, RULES
from sessions._model.staging import Staging
from sessions.errors import (
    CommitError,
    InvalidHistoryError,
    InvalidItemError,
    TransientStorageError,
)
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.helpers import ListSession
from tests.history_items import assistant, call, output, reasoning, user

PAIRS = sorted(CALL_OUTPUT.items())

#: One batch per rule that breaks it (and nothing else) when committed after ``user()``.
BREAKS: dict[str, list[Any]] = {
    "orphan_output": [output("function_call_output", "c1")],
    "missing_output": [call("function_call", "c1"), assistant()],
    "duplicate_call": [
        call("function_call", "c1"),
        output("function_call_output", "c1"),
        call("function_call", "c1"),
    ],
    "duplicate_output": [
        call("function_call", "c1"),
        output("function_call_output", "c1"),
        output("function_call_output", "c1"),
    ],
    "duplicate_id": [assistant(item_id="m1"), assistant(item_id="m1")],
    "reasoning_without_follower": [reasoning(), user("next")],
}


def test_every_rule_has_a_commit_case() -> None:
    # not_an_object never reaches a commit: add_items refuses it (next test)
    assert set(BREAKS) | {"not_an_object"} == set(RULES)


async def rejecting(
    target: Target, sid: str, *, autocommit: bool = False
) -> tuple[Store[Any], Any]:
    """A store of ``integrity="reject"`` and its session ``sid``."""
    store = await target.open(integrity="reject")
    return store, store.session(sid, autocommit=autocommit)


async def test_not_an_object_is_refused_by_add_items_before_any_commit(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    with pytest.raises(InvalidItemError):
        await session.add_items([user(), "plain text"])
    assert not session.has_pending


@pytest.mark.parametrize("rule", sorted(BREAKS))
async def test_reject_refuses_a_commit_breaking_each_rule_and_applies_nothing(
    target: Target, sid: str, rule: str
) -> None:
    store, session = await rejecting(target, sid)
    await session.add_items([user(), *BREAKS[rule]])
    with pytest.raises(InvalidHistoryError) as info:
        await session.commit()
    assert rule in {d.kind for d in info.value.defects}  # type: ignore[attr-defined]
    assert session.pending.items == 1 + len(BREAKS[rule])  # still staged
    assert await (await target.open()).session(sid).get_items() == []  # nothing applied
    await session.rollback()


@pytest.mark.parametrize("rule", sorted(BREAKS))
async def test_quarantine_stores_the_valid_items_and_quarantines_the_offender_of_each_rule(
    target: Target, sid: str, rule: str
) -> None:
    store = await target.open()  # the default
    assert store.integrity == "quarantine"
    session = store.session(sid)
    await session.add_items([user(), *BREAKS[rule]])
    await session.commit()
    assert not session.has_pending
    stored = await (await target.open()).session(sid).get_items()
    entries = await store.read_quarantine(sid)
    assert entries and all(e.batch_id == entries[0].batch_id for e in entries)
    assert any(e.reason.startswith(rule) for e in entries)
    assert stored[0] == user()
    assert len(stored) + len(entries) == 1 + len(BREAKS[rule])  # nothing lost


@pytest.mark.parametrize(("call_type", "output_type"), PAIRS)
async def test_each_pair_type_is_refused_as_an_orphan_and_stored_when_answered(
    target: Target, sid: str, call_type: str, output_type: str
) -> None:
    store, session = await rejecting(target, sid)
    await session.add_items([user(), output(output_type, "c1")])
    with pytest.raises(InvalidHistoryError):
        await session.commit()
    await session.rollback()
    await session.add_items([user(), call(call_type, "c1"), output(output_type, "c1")])
    await session.commit()
    assert len(await session.get_items()) == 3


async def test_an_output_committed_after_its_call_in_an_earlier_commit_is_accepted(
    target: Target, sid: str
) -> None:
    store, session = await rejecting(target, sid, autocommit=True)
    await session.add_items([user()])
    await session.add_items([call("function_call", "c1")])  # pending: the run goes on
    for i in range(40):  # the call falls far behind the first tail read
        await session.add_items([call("function_call", f"x{i}")])
        await session.add_items([output("function_call_output", f"x{i}")])
    await session.add_items([output("function_call_output", "c1"), assistant()])
    assert len(await session.get_items()) == 84


def _count_loads(store: Store[Any], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ``limit`` of every history read the store's backend serves from now on (the
    real read still runs)."""
    limits: list[int] = []
    load = store.backend.load

    async def counted(session_id: str, limit: int | None) -> Any:
        limits.append(-1 if limit is None else limit)
        return await load(session_id, limit)

    monkeypatch.setattr(store.backend, "load", counted)
    return limits


async def test_an_autocommit_output_after_the_sessions_own_call_reads_no_history(
    target: Target, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's autocommit order (input; call; output and answer): the session knows the
    call it committed itself, so the output's commit is judged without a read. A second
    session object, which did not commit the call, reads the tail to find it."""
    store, session = await rejecting(target, sid, autocommit=True)
    await session.add_items([user()])
    await session.add_items([call("function_call", "c1")])
    reads = _count_loads(store, monkeypatch)
    await session.add_items([output("function_call_output", "c1"), assistant()])
    assert reads == []
    await session.add_items([call("function_call", "c2")])
    other = store.session(sid, autocommit=True)
    await other.add_items([output("function_call_output", "c2")])
    assert len(reads) == 1
    assert len(await session.get_items()) == 6


async def test_an_output_commits_after_its_call_reads_no_history_while_the_session_wrote_alone(
    target: Target, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's memory of its history's end carries over its commits: a call two
    commits back is still known. A commit by another session object in between makes
    the session read again."""
    store, session = await rejecting(target, sid, autocommit=True)
    await session.add_items([call("function_call", "c1")])
    await session.add_items([call("function_call", "c2")])
    reads = _count_loads(store, monkeypatch)
    answers = [output("function_call_output", "c1"), output("function_call_output", "c2")]
    await session.add_items([*answers, assistant()])
    assert reads == []
    await session.add_items([call("function_call", "c3")])
    await store.session(sid, autocommit=True).add_items([call("function_call", "c4")])
    answers = [output("function_call_output", "c3"), output("function_call_output", "c4")]
    await session.add_items(answers)
    assert len(reads) == 1
    assert len(await session.get_items()) == 9


async def test_a_call_popped_by_another_session_object_is_not_trusted_from_memory(
    target: Target, sid: str
) -> None:
    store, session = await rejecting(target, sid, autocommit=True)
    await session.add_items([user(), call("function_call", "c1")])
    assert (await store.session(sid, autocommit=True).pop_item())["type"] == "function_call"
    with pytest.raises(InvalidHistoryError, match="orphan_output"):
        await session.add_items([output("function_call_output", "c1")])
    await session.rollback()
    assert await session.get_items() == [user()]


@pytest.mark.parametrize("erase", ["delete_session", "delete_user", "purge"])
async def test_a_call_erased_by_an_admin_write_is_not_trusted_from_memory(
    target: Target, sid: str, erase: str
) -> None:
    store, session = await rejecting(target, sid, autocommit=True)
    session.set_info(user_id=f"u-{sid}")
    await session.add_items([user(), call("function_call", "c1")])
    if erase == "delete_session":
        assert await store.delete_session(sid)
    elif erase == "delete_user":
        assert await store.delete_user(f"u-{sid}") == [sid]
    else:
        assert sid in [info.session_id for info in await store.purge(timedelta(0))]
    with pytest.raises(InvalidHistoryError, match="orphan_output"):
        await session.add_items([output("function_call_output", "c1")])
    await session.rollback()
    assert await session.get_items() == []


async def test_a_pending_call_at_the_end_of_a_commit_is_accepted(target: Target, sid: str) -> None:
    """A run cancelled mid-tool or waiting for an approval: the SDK resumes it."""
    store, session = await rejecting(target, sid)
    await session.add_items([user(), reasoning(), call("function_call", "c1")])
    await session.commit()
    await session.add_items([output("function_call_output", "c1"), assistant()])
    await session.commit()
    assert len(await session.get_items()) == 5


async def test_off_stores_what_it_is_given(target: Target, sid: str) -> None:
    store = await target.open(integrity="off")
    session = store.session(sid)
    await session.add_items([user(), output("function_call_output", "c1")])
    await session.commit()
    assert len(await session.get_items()) == 2
    assert await store.read_quarantine(sid) == []


async def test_the_session_setting_overrides_the_store(store: Store[Any], sid: str) -> None:
    session = store.session(sid, integrity="reject")
    assert session.integrity == "reject" and store.integrity == "quarantine"
    await session.add_items([output("function_call_output", "c1")])
    with pytest.raises(InvalidHistoryError):
        await session.commit()
    await session.rollback()


async def test_quarantine_logs_a_warning_naming_rule_type_and_call_id_without_item_text(
    store: Store[Any], sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = store.session(sid)
    secret = {"type": "function_call_output", "call_id": "c7", "output": "SECRET TEXT"}
    with caplog.at_level(logging.WARNING, logger="sessions"):
        await session.add_items([user(), secret])
        await session.commit()
    (record,) = [r for r in caplog.records if "quarantined" in r.getMessage()]
    text = record.getMessage()
    assert "orphan_output" in text and "function_call_output" in text and "'c7'" in text
    assert "SECRET TEXT" not in text


async def test_delete_session_deletes_its_quarantine(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    await session.add_items([user(), output("function_call_output", "c1")])
    await session.commit()
    assert len(await store.read_quarantine(sid)) == 1
    assert await store.delete_session(sid)
    assert await store.read_quarantine(sid) == []


async def test_quarantine_keys_grow_across_commits(store: Store[Any], sid: str) -> None:
    session = store.session(sid)
    for i in range(3):
        await session.add_items([user(), output("function_call_output", f"c{i}")])
        await session.commit()
    entries = await store.read_quarantine(sid)
    assert [e.data for e in entries] == [
        f'{{"type":"function_call_output","call_id":"c{i}","output":"done"}}' for i in range(3)
    ]
    assert sorted(e.key for e in entries) == [e.key for e in entries]
    assert len({e.key for e in entries}) == 3


async def test_a_limited_read_never_starts_with_an_orphan_output(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    history = [
        user(),
        call("function_call", "c1"),
        output("function_call_output", "c1"),
        assistant("answer"),
    ]
    await session.add_items(history)
    await session.commit()
    assert await session.get_items(limit=2) == [assistant("answer")]
    assert await session.get_items(limit=3) == history[1:]
    # staged items too, and with integrity off the window is returned as is
    await session.add_items([user("more")])
    assert await session.get_items(limit=3) == [assistant("answer"), user("more")]
    raw = store.session(sid, integrity="off")
    assert await raw.get_items(limit=2) == history[2:]


async def test_the_compaction_hook_refuses_to_split_a_call_from_its_output(
    store: Store[Any], sid: str
) -> None:
    from sessions._engine import compaction as _compaction

    session = store.session(sid)
    await session.add_items(
        [user(), call("function_call", "c1"), output("function_call_output", "c1"), assistant()]
    )
    await session.commit()
    backend = store.backend
    window = await _compaction.read_window(backend, sid, session._staging, 2)
    assert window is not None
    plan = await _compaction.plan_replacement(backend, sid, session._staging, window.idents, None)
    assert plan is None  # removing the output while its call stays: refused
    window = await _compaction.read_window(backend, sid, session._staging, 3)
    assert window is not None
    plan = await _compaction.plan_replacement(backend, sid, session._staging, window.idents, None)
    assert plan is not None


@pytest.mark.parametrize("autocommit", [True, False])
async def test_a_whole_history_replacement_is_judged_like_any_commit(
    store: Store[Any], sid: str, autocommit: bool
) -> None:
    """The SDK's ``_atomic_replace_items`` hook (compaction): one commit of its own with
    autocommit, staged otherwise; either way its items keep the rules."""
    session = store.session(sid, autocommit=autocommit)
    await session.add_items([user("old")])
    await session.commit()
    assert await session._atomic_replace_items([user(), output("function_call_output", "c1")])
    await session.commit()
    assert await store.session(sid).get_items() == [user()]
    assert [e.reason.split(":")[0] for e in await store.read_quarantine(sid)] == ["orphan_output"]


async def test_the_memory_backend_quarantines_and_rejects_like_the_others(sid: str) -> None:
    store = await MemoryStore.open()
    session = store.session(sid)
    await session.add_items([user(), output("function_call_output", "c1")])
    await session.commit()
    assert await session.get_items() == [user()]
    assert len(await store.read_quarantine(sid)) == 1
    strict = store.session(sid, integrity="reject")
    await strict.add_items([output("function_call_output", "c2")])
    with pytest.raises(InvalidHistoryError):
        await strict.commit()
    await strict.rollback()
    await store.close()


async def test_an_invalid_integrity_is_refused_by_name(target: Target, sid: str) -> None:
    with pytest.raises(ValueError, match="integrity"):
        await target.open(integrity="strict")
    store = await target.open()
    with pytest.raises(ValueError, match="integrity"):
        store.session(sid, integrity="loose")  # type: ignore[arg-type]


async def test_open_store_takes_integrity_from_the_url(target: Target) -> None:
    sep = "&" if "?" in target.url else "?"
    store = await open_store(f"{target.url}{sep}integrity=reject")
    try:
        assert store.integrity == "reject"
    finally:
        await store.close()
    with pytest.raises(ValueError, match="integrity"):
        await open_store(f"{target.url}{sep}integrity=maybe")


class _Inner(ListSession):
    """A minimal SDK session in memory (what the wrapper wraps)."""

    def __init__(self) -> None:
        super().__init__("inner")
        self.session_settings = None

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items if limit is None else self.items[-limit:])


async def test_the_wrapper_rejects_by_default_and_refuses_quarantine() -> None:
    inner = _Inner()
    with pytest.raises(ValueError, match="quarantine"):
        TransactionalSession(inner, integrity="quarantine")
    wrapped = TransactionalSession(inner)
    assert wrapped.integrity == "reject"
    await wrapped.add_items([user(), output("function_call_output", "c1")])
    with pytest.raises(InvalidHistoryError):
        await wrapped.commit()
    assert inner.items == []
    await wrapped.rollback()
    await wrapped.add_items([user(), call("function_call", "c1")])
    await wrapped.commit()
    await wrapped.add_items([output("function_call_output", "c1")])
    await wrapped.commit()
    assert len(inner.items) == 3
    await wrapped.close()


async def test_a_commit_that_cannot_settle_an_earlier_unknown_outcome_is_a_commit_error(
    target: Target, sid: str
) -> None:
    """Before judging, a batch whose earlier commit has an unknown outcome is settled by
    id (never judged against itself); if the database cannot answer, the commit fails
    with ``CommitError(outcome_known=False)``, changes still staged, and a later commit
    applies the batch once."""
    store = await target.open(retry=RetryPolicy(attempts=1))
    proxy = install_proxy(store)
    session = store.session(sid)
    await session.add_items([user(), call("function_call", "c1")])

    async def lost() -> None:
        raise TransientStorageError("connection lost", outcome_known=False)

    proxy.after_apply = lost  # applied, but the caller cannot tell
    proxy.before_applied = lost
    with pytest.raises(CommitError) as first:
        await session.commit()
    assert first.value.outcome_known is False
    proxy.after_apply = None
    await session.add_items([output("function_call_output", "c1")])
    with pytest.raises(CommitError) as second:
        await session.commit()
    assert second.value.outcome_known is False and session.pending.items == 3
    proxy.before_applied = None
    await session.commit()
    assert len(await store.session(sid).get_items()) == 3  # once, nothing quarantined
    assert await store.read_quarantine(sid) == []


def test_a_rejected_commit_leaves_batches_of_unknown_outcome_in_doubt() -> None:
    staging = Staging()
    staging.add(['{"role":"user","content":"a"}'], [{"role": "user"}])
    (batch,) = staging.seal()
    staging.failed(known=False)
    staging.add(['{"role":"user","content":"b"}'], [{"role": "user"}])
    doubtful = set(staging.unresolved())
    staging.seal()
    staging.failed(known=True, unknown=doubtful)  # as after an InvalidHistoryError
    assert staging.unresolved() == [batch.batch_id]


async def test_a_store_migrated_past_3_without_it_gets_the_quarantine_table_on_open(
    target: Target, sid: str
) -> None:
    """Migrations were numbered apart by branches (3: quarantine, 5: catalogue): a database
    that recorded 5 but not 3 gets 3 when opened, and quarantines from then on."""
    await target.open()
    await target.execute("DROP TABLE txs_quarantine")
    await target.execute(f"DELETE FROM {target.schema_table} WHERE version = 3")
    store = await target.open()
    session = store.session(sid)
    await session.add_items([user(), output("function_call_output", "c1")])
    await session.commit()
    assert len(await store.read_quarantine(sid)) == 1


@pytest.mark.parametrize("mode", ["reject", "quarantine"])
async def test_a_staged_pop_of_a_call_whose_output_another_writer_stored_since_is_refused(
    target: Target, sid: str, mode: str
) -> None:
    """Found by the model test (tests/model): the pop was staged while the call was the
    newest item; another writer then stored its output. Committing the pop would leave
    that output without its call (the Responses API refuses it): refused in both modes
    (a pop cannot be quarantined), nothing applied, changes still staged."""
    store = await target.open(integrity=mode)
    mine = store.session(sid)
    await mine.add_items([user("q"), call("function_call", "c1")])
    await mine.commit()
    assert (await mine.pop_item())["type"] == "function_call"  # staged
    other = store.session(sid)
    await other.add_items([output("function_call_output", "c1"), assistant("answer")])
    await other.commit()
    with pytest.raises(InvalidHistoryError, match="'c1' while its function_call_output stays"):
        await mine.commit()
    assert mine.has_pending
    await mine.rollback()
    stored = await store.session(sid).get_items()
    assert stored == [
        user("q"),
        call("function_call", "c1"),
        output("function_call_output", "c1"),
        assistant("answer"),
    ]


async def test_popping_an_output_and_then_its_call_commits(target: Target, sid: str) -> None:
    store, session = await rejecting(target, sid)
    await session.add_items([user("q"), call("function_call", "c1")])
    await session.commit()
    await session.add_items([output("function_call_output", "c1")])
    await session.commit()
    for _ in range(2):
        await session.pop_item()
    await session.commit()
    assert await store.session(sid).get_items() == [user("q")]

"""Group commit, on every backend: commits of several sessions that arrive together share
one transaction, and each still succeeds or fails alone.

To make a group form for certain, the database's write lock is held by another
connection (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a ``SHARE ROW EXCLUSIVE`` lock on
the batch table) while more commits are started than a backend sends on its own; once
every commit has reached the backend, the lock is released. Whether commits shared a
transaction is read back from the database: every batch record's ``committed_at`` is
one value per transaction (SQLite: the group's clock reading; PostgreSQL: ``now()``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from sessions import Batch, Store
from sessions._model.backend import TurnRecord, TurnUsage
from sessions.errors import CommitError, SessionDeletedError
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.helpers import msg

# More commits than any backend sends at once on its own, so that the rest must wait
# and leave together.
EARLY = 8


async def transactions_of(target: Target, session_ids: list[str]) -> int:
    """How many transactions recorded these sessions' batches."""
    marks = ", ".join(target.param(n) for n in range(1, len(session_ids) + 1))
    found = await target.fetch_value(
        f"SELECT count(DISTINCT committed_at) FROM txs_batches WHERE session_id IN ({marks})",
        *session_ids,
    )
    return int(found)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


async def stored(target: Target, session_id: str) -> list[Any]:
    other = await target.open()
    return await other.session(session_id).get_items()


async def test_a_failing_commit_in_a_group_fails_alone_and_the_others_share_one_transaction(
    store: Store[Any], target: Target
) -> None:
    run = uuid.uuid4().hex[:8]
    early = [f"g-{run}-early-{i}" for i in range(EARLY)]
    good = [f"g-{run}-good-{i}" for i in range(3)]
    bad = f"g-{run}-bad"
    order = early + good[:2] + [bad] + good[2:]
    proxy = install_proxy(store)
    sessions = {sid: store.session(sid) for sid in order}
    for sid, session in sessions.items():
        await session.add_items([msg(sid), msg("poison" if sid == bad else "fine")])
    await target.add_poison_trigger(bad)
    try:
        async with target.writes_held():
            tasks = {sid: asyncio.ensure_future(sessions[sid].commit()) for sid in order}
            await until(lambda: proxy.apply_calls == len(order), "every commit reached the backend")
        results = await asyncio.gather(*tasks.values(), return_exceptions=True)
        outcomes = dict(zip(order, results, strict=True))
    finally:
        await target.drop_poison_trigger()

    failure = outcomes.pop(bad)
    assert isinstance(failure, CommitError), failure
    assert failure.outcome_known is True and "poison" in str(failure)
    assert all(outcome is None for outcome in outcomes.values()), outcomes
    for sid in early + good:
        assert await stored(target, sid) == [msg(sid), msg("fine")], sid
    assert await stored(target, bad) == []
    assert sessions[bad].pending.items == 2  # still staged, to retry or roll back
    # The group really formed: the good commits, started after the early ones had taken
    # every free send, were stored by ONE transaction although one of their group failed.
    assert await transactions_of(target, good) == 1
    await sessions[bad].commit()  # the trigger is gone: applies now, once
    assert await stored(target, bad) == [msg(bad), msg("poison")]


async def test_commits_of_one_session_in_one_group_each_stay_whole_and_contiguous(
    store: Store[Any], target: Target
) -> None:
    run = uuid.uuid4().hex[:8]
    sid = f"g-{run}-shared"
    early = [f"g-{run}-early-{i}" for i in range(EARLY)]
    proxy = install_proxy(store)
    writers = [store.session(sid) for _ in range(3)]
    for n, writer in enumerate(writers):
        await writer.add_items([msg(f"w{n}.{i}") for i in range(4)])
    others = [store.session(s) for s in early]
    for other in others:
        await other.add_items([msg("x")])
    async with target.writes_held():
        tasks = [asyncio.ensure_future(s.commit()) for s in others + writers]
        await until(lambda: proxy.apply_calls == len(tasks), "every commit reached the backend")
    await asyncio.gather(*tasks)
    texts = [item["content"] for item in await stored(target, sid)]
    assert sorted(texts) == sorted(f"w{n}.{i}" for n in range(3) for i in range(4))
    for n in range(3):  # each writer's batch is contiguous and in order
        start = texts.index(f"w{n}.0")
        assert texts[start : start + 4] == [f"w{n}.{i}" for i in range(4)], texts
    assert await transactions_of(target, [sid]) == 1


# Texts a group must carry unchanged: control characters (U+001E, which separates the
# items of a PostgreSQL group statement, among them), quotes, backslashes, text that
# looks like JSON or SQL, characters beyond ASCII and beyond the BMP.
_AWKWARD = ["a\x1eb", "\x1e", "\n\t\r\x00?", '"quoted" \\ back', '{"k": [1]}', "'; --", "é 🙂 日本"]


async def test_awkward_texts_and_run_ids_in_a_group_are_stored_exactly(
    store: Store[Any], target: Target
) -> None:
    """Commits sharing one group whose items hold control characters (the separator of
    the PostgreSQL group statement's items among them), quotes, backslashes and
    characters beyond ASCII, and whose run ids hold quotes and characters beyond ASCII:
    each session reads back exactly its own items, in order, with its run id."""
    run = uuid.uuid4().hex[:8]
    early = [f"g-{run}-early-{i}" for i in range(EARLY)]
    proxy = install_proxy(store)
    owners = {f"g-{run}-awk-{i}-é\"'": text for i, text in enumerate(_AWKWARD)}
    writers = {sid: store.session(sid) for sid in owners}
    for sid, text in owners.items():
        writers[sid].set_run_id(f'run "{text[-1:]}" 🙂')
        await writers[sid].add_items([msg(text), {"role": "user", "content": [text, {"t": text}]}])
    others = [store.session(s) for s in early]
    for other in others:
        await other.add_items([msg("x")])
    async with target.writes_held():
        tasks = [asyncio.ensure_future(s.commit()) for s in [*others, *writers.values()]]
        await until(lambda: proxy.apply_calls == len(tasks), "every commit reached the backend")
    await asyncio.gather(*tasks)
    postgres = getattr(store.backend, "group_stats", None)
    if postgres is not None:  # applied by the group's statement, not entry by entry
        assert postgres.isolated == 0 and postgres.largest >= len(owners), postgres
    for sid, text in owners.items():
        assert await stored(target, sid) == [
            msg(text),
            {"role": "user", "content": [text, {"t": text}]},
        ], sid
        turns = await (await target.open()).session(sid).turns()
        assert [turn.run_id for turn in turns] == [f'run "{text[-1:]}" 🙂'], sid
    assert await transactions_of(target, list(owners)) == 1


@pytest.mark.parametrize("count", [1, 2])
async def test_commits_one_after_another_are_not_held_back(
    store: Store[Any], target: Target, count: int
) -> None:
    """Sequential commits never wait for company: each is its own transaction."""
    sid = f"g-{uuid.uuid4().hex}"
    session = store.session(sid)
    for i in range(count * 3):
        await session.add_items([msg(str(i))])
        await session.commit()
    assert await transactions_of(target, [sid]) == count * 3


async def test_callers_cancelled_while_their_commits_wait_in_a_group_get_it_after_every_commit_landed(
    store: Store[Any], target: Target
) -> None:
    """Every other caller is cancelled (twice) while the group waits for the write lock:
    those callers get ``CancelledError`` only once their commit is stored, nothing of any
    commit is lost or doubled, and the callers left alone are not disturbed."""
    run = uuid.uuid4().hex[:8]
    order = [f"c-{run}-{i}" for i in range(EARLY + 6)]
    proxy = install_proxy(store)
    sessions = {sid: store.session(sid) for sid in order}
    for sid, session in sessions.items():
        await session.add_items([msg(sid), msg("second")])
    async with target.writes_held():
        tasks = {sid: asyncio.ensure_future(sessions[sid].commit()) for sid in order}
        await until(lambda: proxy.apply_calls == len(order), "every commit reached the backend")
        cancelled = order[1::2]
        for _ in range(2):
            for sid in cancelled:
                tasks[sid].cancel()
            await asyncio.sleep(0.05)
        # Held: no caller is released while the database still holds its commit back.
        assert not any(task.done() for task in tasks.values())
    outcomes = await asyncio.gather(*tasks.values(), return_exceptions=True)
    results = dict(zip(order, outcomes, strict=True))
    for sid in order:
        if sid in cancelled:
            assert isinstance(results[sid], asyncio.CancelledError), (sid, results[sid])
        else:
            assert results[sid] is None, (sid, results[sid])
        assert await stored(target, sid) == [msg(sid), msg("second")], sid
        assert sessions[sid].pending.items == 0, sid  # known applied: nothing left staged


def _batch(batch_id: str, texts: list[str], turn: TurnRecord | None = None) -> Batch:
    return Batch(batch_id, False, (), tuple(json.dumps(msg(t)) for t in texts), turn=turn)


async def _what_is_stored(store: Store[Any], target: Target, session_id: str) -> Any:
    """Everything the commits wrote for one session: its rows, turn records, turn
    window and counters (a record's time stays out if its batch gave none: ``now()``)."""
    backend = store.backend
    turns, keys = await backend.load_turns(session_id)
    given = {record.created_at for record in _TURN_TIMES.values()}
    records = [(row, row.created_at in given) for row in turns]
    counters = await target.fetch_value(
        "SELECT item_count || ',' || next_seq || ',' || version || ',' || turn_count || ','"
        f" || turn_items FROM txs_sessions WHERE session_id = {target.param(1)}",
        session_id,
    )
    window = await backend.load_turn_window(session_id, oldest=10)
    return (
        await backend.load(session_id, None),
        [row if given_time else replace(row, created_at=None) for row, given_time in records],
        keys,
        None if window is None else (window.count, len(window.rows)),
        counters,
    )


_TURN_TIMES = {
    "t1": TurnRecord("run-1", datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)),
    "t2": TurnRecord(None, None, TurnUsage(1, 2, 3, 4, 5)),
    "t3": TurnRecord("run-3", datetime(2024, 5, 2, 8, 30, tzinfo=timezone.utc), TurnUsage(7)),
}


async def test_batches_of_one_session_in_one_group_apply_as_they_would_one_by_one(
    store: Store[Any], target: Target
) -> None:
    """A group holding several batches of a new and of an existing session, a batch id
    repeated in the group and one already stored, an empty batch: each session ends
    exactly as the same batches applied one by one leave another (rows and their keys,
    turn records, turn index, counters), and the group is one transaction."""
    run = uuid.uuid4().hex[:8]
    t1, t2, t3 = _TURN_TIMES["t1"], _TURN_TIMES["t2"], _TURN_TIMES["t3"]
    # (session, batches) in arrival order; one session's entries keep it in the group.
    # "new" sorts before "old": the new session's rows are locked first.
    plan = [
        ("new", [_batch("a1", ["a1.0", "a1.1"], t1), _batch("a2", ["a2.0", "a2.1", "a2.2"])]),
        ("old", [_batch("stored", ["again"], t1), _batch("b2", ["b2.0", "b2.1"], t2)]),
        ("new", [_batch("a1", ["dup"], t3), _batch("c3", ["c3.0"], t3), _batch("a2", ["dup"])]),
        ("old", [_batch("b3", [], t2), _batch("b4", ["b4.0"], t1), _batch("b4", ["dup"], t1)]),
    ]
    early = [f"g-{run}-early-{i}" for i in range(EARLY)]
    proxy = install_proxy(store)
    for name in ("old", "ref-old"):
        await proxy.apply(f"g-{run}-{name}", [_batch("stored", ["s.0", "s.1"], t2)])
    others = [store.session(s) for s in early]
    for other in others:
        await other.add_items([msg("x")])
    calls = len(early) + 2 + len(plan)
    async with target.writes_held():
        tasks = [asyncio.ensure_future(s.commit()) for s in others]
        tasks += [asyncio.ensure_future(proxy.apply(f"g-{run}-{n}", b)) for n, b in plan]
        await until(lambda: proxy.apply_calls == calls, "every commit reached the backend")
    assert await asyncio.gather(*tasks) == [None] * len(tasks)
    postgres = getattr(store.backend, "group_stats", None)
    if postgres is not None:  # applied by the group's statement, not entry by entry
        assert postgres.isolated == 0 and postgres.largest >= len(plan), postgres
    for name, batches in plan:  # the reference: the same batches, one at a time
        for batch in batches:
            await proxy.apply(f"g-{run}-ref-{name}", [batch])
    for name in ("new", "old"):
        grouped = await _what_is_stored(store, target, f"g-{run}-{name}")
        assert grouped == await _what_is_stored(store, target, f"g-{run}-ref-{name}"), name
    rows = await proxy.load(f"g-{run}-new", None)
    assert [json.loads(text)["content"] for _, text in rows] == [
        "a1.0", "a1.1", "a2.0", "a2.1", "a2.2", "c3.0"
    ]  # fmt: skip
    assert [key for key, _ in rows] == list(range(rows[0][0], rows[0][0] + 6))
    _, version, life = await proxy.load_versioned(f"g-{run}-new", None)
    assert version == 3 and life is not None  # one version per applied batch
    created_now = await target.fetch_value(
        "SELECT count(*) FROM txs_sessions WHERE created_at = updated_at"
        f" AND session_id = {target.param(1)}",
        f"g-{run}-new",
    )
    assert created_now == 1  # made by the group's transaction
    rows = await proxy.load(f"g-{run}-old", None)
    assert [json.loads(text)["content"] for _, text in rows] == [
        "s.0", "s.1", "b2.0", "b2.1", "b4.0"
    ]  # fmt: skip
    _, version, _ = await proxy.load_versioned(f"g-{run}-old", None)
    assert version == 4  # stored, b2, b3 (empty), b4
    p1, p2 = target.param(1), target.param(2)
    shared = await target.fetch_value(  # the group's batches, "stored" left out
        "SELECT count(DISTINCT committed_at) FROM txs_batches"
        f" WHERE session_id IN ({p1}, {p2}) AND batch_id <> 'stored'",
        f"g-{run}-new",
        f"g-{run}-old",
    )
    assert shared == 1


async def test_a_session_deleted_under_a_group_is_refused_alone(
    store: Store[Any], target: Target
) -> None:
    """Commits sharing a group, one of a session another store deleted after it was
    read: that one is refused, the others (a new session, an existing one with two
    batches) are stored together."""
    run = uuid.uuid4().hex[:8]
    early = [f"g-{run}-early-{i}" for i in range(EARLY)]
    gone, kept, fresh = f"g-{run}-gone", f"g-{run}-kept", f"g-{run}-fresh"
    proxy = install_proxy(store)
    objects = {sid: store.session(sid) for sid in (gone, kept)}
    for session in objects.values():
        await session.add_items([msg("a")])
        await session.commit()
        await session.get_items()
    other = await target.open()
    assert await other.delete_session(gone)
    for session in objects.values():
        await session.add_items([msg("b")])
    writers = [store.session(s) for s in early]
    for writer in writers:
        await writer.add_items([msg("x")])
    proxy.apply_calls = 0
    async with target.writes_held():
        tasks = [asyncio.ensure_future(s.commit()) for s in writers]
        refused = asyncio.ensure_future(objects[gone].commit())
        tasks += [
            asyncio.ensure_future(objects[kept].commit()),
            asyncio.ensure_future(proxy.apply(fresh, [_batch("f1", ["f"]), _batch("f2", ["g"])])),
        ]
        await until(lambda: proxy.apply_calls == len(tasks) + 1, "every commit reached the backend")
    with pytest.raises(SessionDeletedError):
        await refused
    assert await asyncio.gather(*tasks) == [None] * len(tasks)
    assert await stored(target, gone) == []
    assert await other.session_info(gone) is None
    assert await stored(target, kept) == [msg("a"), msg("b")]
    assert await stored(target, fresh) == [msg("f"), msg("g")]
    p1, p2 = target.param(1), target.param(2)
    shared = await target.fetch_value(  # the group's batches: not kept's first commit
        "SELECT count(*) || ',' || count(DISTINCT committed_at) FROM txs_batches WHERE"
        f" session_id IN ({p1}, {p2}) AND committed_at >= (SELECT min(committed_at)"
        f" FROM txs_batches WHERE session_id = {p2})",
        kept,
        fresh,
    )
    assert shared == "3,1"  # kept's second commit, f1 and f2: one transaction
    postgres = getattr(store.backend, "group_stats", None)
    if postgres is not None:  # the group failed whole and was applied entry by entry
        assert postgres.isolated == 1, postgres
    await objects[gone].rollback()

"""What a commit writes with its turn lands with it or not at all, proved by making the
database itself fail the commit's transaction at each of its writes.

A real trigger raises on the first row that the commit inserts into one table: the
items, the turn record (with its usage), the catalogue's tags (after the entry's row
is updated), the run state (after the catalogue entry is written), the fork record.
Whatever table fails, nothing of the batch may be visible afterwards, so these tests
fail for a backend that writes any part in a transaction (or commit) of its own,
whichever order it writes them in. A version conflict cannot show this: it is checked
before anything of the batch is written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessions import Store, TurnUsage
from sessions.errors import CommitError
from tests.conftest import Target
from tests.contract import raw
from tests.helpers import msg


def state(label: str) -> str:
    """Stands for ``RunState.to_string()`` (the API takes the text as well)."""
    return json.dumps({"$schemaVersion": "test", "label": label})


async def durable(store: Store[Any], target: Target, sid: str) -> dict[str, Any]:
    """Everything of the session a reader sees, read by a fresh session object."""
    reader = store.session(sid)
    info = await store.session_info(sid)
    assert info is not None
    record = await reader.run_state_record()
    tags = await target.fetch_value(
        f"SELECT count(*) FROM txs_session_tags WHERE session_id = {target.param(1)}",
        sid,
    )
    return {
        "items": await reader.get_items(),
        "turns": [(t.number, t.items) for t in await reader.turns()],
        "usage": await reader.usage(),
        "entry": (info.user_id, info.title, info.tags, info.metadata, info.version),
        "counts": (info.item_count, info.updated_at),
        "tag rows": int(tags),
        "run state": (record.text, record.version),
    }


@pytest.mark.parametrize("table", ["txs_items", "txs_turns", "txs_session_tags", "txs_run_states"])
async def test_a_commit_failing_at_any_of_its_writes_leaves_entry_state_usage_and_items_unchanged(
    store: Store[Any], target: Target, sid: str, table: str
) -> None:
    session = store.session(sid)
    session.set_info(user_id="carol", title="Before", tags={"old"})
    await session.add_items([msg("before")])
    session.record_usage(TurnUsage(1, 2, 2, 0, 0))
    session.stage_run_state(state("before"))
    await session.commit()
    before = await durable(store, target, sid)

    session.set_info(user_id="mallory", title="After", tags={"new", "other"}, metadata={"k": 1})
    await session.add_items([msg("a"), msg("b")])
    session.record_usage(TurnUsage(1, 5, 5, 0, 0))
    session.stage_run_state(state("after"))
    await target.add_failing_trigger(table, sid)
    try:
        with pytest.raises(CommitError) as failed:
            await session.commit()
        assert failed.value.outcome_known is True
        assert f"injected failure on {table}" in str(failed.value)
        assert await durable(store, target, sid) == before
        assert session.pending.info and session.pending.items == 2  # still staged
    finally:
        await target.drop_failing_trigger(table)

    await session.commit()  # the same batch, once the database takes it: all of it lands
    after = await durable(store, target, sid)
    assert after["items"] == [msg("before"), msg("a"), msg("b")]
    assert after["turns"] == [(1, 1), (2, 2)]
    assert after["usage"] == TurnUsage(2, 7, 7, 0, 0)
    assert after["entry"] == ("mallory", "After", ("new", "other"), {"k": 1}, 2)
    assert after["tag rows"] == 2
    assert after["run state"] == (state("after"), 2)


@pytest.mark.parametrize("table", ["txs_items", "txs_turns"])
async def test_a_plain_commit_failing_at_its_items_or_turn_leaves_usage_and_items_unchanged(
    store: Store[Any], target: Target, sid: str, table: str
) -> None:
    """Items and usage only (no entry, no run state): on PostgreSQL the path of the
    shared group-commit statement, not the explicit transaction of the test above."""
    session = store.session(sid)
    await session.add_items([msg("before")])
    session.record_usage(TurnUsage(1, 2, 2, 0, 0))
    await session.commit()
    before = await durable(store, target, sid)
    await session.add_items([msg("a"), msg("b")])
    session.record_usage(TurnUsage(1, 5, 5, 0, 0))
    await target.add_failing_trigger(table, sid)
    try:
        with pytest.raises(CommitError, match=f"injected failure on {table}"):
            await session.commit()
        assert await durable(store, target, sid) == before
    finally:
        await target.drop_failing_trigger(table)
    await session.commit()
    after = await durable(store, target, sid)
    assert (after["items"], after["turns"]) == (
        [msg("before"), msg("a"), msg("b")],
        [(1, 1), (2, 2)],
    )
    assert after["usage"] == TurnUsage(2, 7, 7, 0, 0)


async def test_a_fork_failing_after_its_record_is_written_leaves_no_record_and_no_items(
    store: Store[Any], target: Target, sid: str
) -> None:
    """The fork record is written by the fork's first batch; the items of its last turn
    are written after it, in the same transaction, and fail here."""
    source = store.session(sid)
    for n in range(3):
        await source.add_items([msg(f"t{n}")])
        await source.commit()
    dst = f"{sid}-fork"
    await target.add_poison_trigger(dst)  # "poison" is only in the last turn
    await source.add_items([msg("poison")])
    await source.commit()
    try:
        with pytest.raises(CommitError):
            await source.fork(dst)
        assert await source.branches() == []
        assert await store.session_info(dst) is None
        assert await raw.stored_rows(target, dst) == 0
    finally:
        await target.drop_poison_trigger()
    assert await source.fork(dst) == 4
    assert [b.session_id for b in await source.branches()] == [dst]


async def test_a_fork_whose_record_the_database_rejects_copies_no_items(
    store: Store[Any], target: Target, sid: str
) -> None:
    source = store.session(sid)
    await source.add_items([msg("one"), msg("two")])
    await source.commit()
    dst = f"{sid}-fork"
    await target.add_failing_trigger("txs_branches", dst)
    try:
        with pytest.raises(CommitError, match="injected failure on txs_branches"):
            await source.fork(dst)
        assert await store.session_info(dst) is None
        assert await raw.stored_rows(target, dst) == 0
    finally:
        await target.drop_failing_trigger("txs_branches")
    assert await source.fork(dst) == 1
    assert await store.session(dst).get_items() == [msg("one"), msg("two")]

"""The reliability checker reads raw rows: what ``get_items()`` skips, it reports.

Rows are planted with raw SQL in the real database (both backends), then the checker
every scenario uses (``read_history`` + ``check_history``) must name each bad row and
the metadata that no longer agrees with the rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from sessions import Store
from tests.conftest import Target
from tests.contract import raw

from .harness import read_history
from .invariant import Ledger, RawRow, RawSession, check_history, check_rows, make_batch

TORN = '{"type":"message","role":"user","content":"w0 b9 1/'  # cut mid-write
NULL = "null"


async def commit_batches(store: Store[Any], sid: str, batches: list[int]) -> Ledger:
    session = store.session(sid)
    ledger = Ledger()
    for b in batches:
        await session.add_items(make_batch(0, b, size=4))
        await session.commit()
        ledger.confirm(0, b)
    await session.close()
    return ledger


async def plant(target: Target, sid: str, seq: int, data: str) -> None:
    p = [target.param(n) for n in (1, 2, 3, 4)]
    await target.execute(
        f"INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES ({', '.join(p)})",
        sid,
        seq,
        "planted",
        data,
    )


async def test_a_healthy_history_checks_clean(target: Target, sid: str) -> None:
    store = await target.open()
    ledger = await commit_batches(store, sid, [0, 1])
    history = await read_history(target, sid)
    assert len(history) == 8
    assert check_history(history, ledger) == []
    async with target.raw_reader() as reader:  # the turn index is read, so it is checked
        raw = await reader.read(sid)
    assert raw.index == (2, 8)
    assert raw.turns == [(1, 4, False, 4), (5, 8, False, 4)] and raw.hidden == []


async def set_count(target: Target, sql: str, sid: str) -> None:
    await target.execute(sql.replace("$s", target.param(1)), sid)


async def test_the_checker_reports_turn_counts_that_disagree_with_the_rows(
    target: Target, sid: str
) -> None:
    store = await target.open()
    await commit_batches(store, sid, [0, 1, 2])  # turns of keys 1..4, 5..8, 9..12
    assert await store.session(sid).rewind(to_turn=2) == 1  # 9..12 hidden
    ledger = Ledger({0: [0, 1]})
    assert check_history(await read_history(target, sid), ledger) == []  # hidden counted right
    await set_count(target, "UPDATE txs_sessions SET turn_count = 3 WHERE session_id = $s", sid)
    await set_count(target, "UPDATE txs_sessions SET turn_items = 7 WHERE session_id = $s", sid)
    await set_count(
        target, "UPDATE txs_turns SET items = 3 WHERE session_id = $s AND first_seq = 5", sid
    )
    await set_count(
        target, "UPDATE txs_turns SET items = 0 WHERE session_id = $s AND first_seq = 9", sid
    )
    assert len(await store.session(sid).get_items()) == 8  # the rows are as they were
    problems = check_history(await read_history(target, sid), ledger)
    assert sorted(p.split(": ", 1)[1] for p in problems) == sorted(
        [
            "metadata turn_count 3 but 2 visible turn record(s) hold items",
            "metadata turn_items 7 but the visible turn records hold 8 item(s)",
            "turn record 5..8: items 3 but 4 item(s) stored in its range",
            "turn record 9..12 (hidden): items 0 but 4 hidden item(s) stored in its range",
        ]
    ), problems


async def test_the_checker_reports_a_torn_row_and_a_null_row(target: Target, sid: str) -> None:
    store = await target.open()
    ledger = await commit_batches(store, sid, [0, 1])
    await plant(target, sid, 9, TORN)
    await plant(target, sid, 10, NULL)
    assert len(await store.session(sid).get_items()) == 8  # what a session shows: 8 of 10
    problems = check_history(await read_history(target, sid), ledger)
    text = "\n".join(problems)
    assert "row seq 9 (batch planted): not valid JSON" in text, text
    assert "row seq 10 (batch planted): a JSON NoneType, not an object" in text, text
    assert "metadata item_count 8 but 10 row(s) stored" in text, text
    assert "next_seq 9 would reuse stored seq 10" in text, text


async def test_the_checker_reports_a_row_that_is_not_what_a_session_stores(
    target: Target, sid: str
) -> None:
    store = await target.open()
    ledger = await commit_batches(store, sid, [0])
    await raw.corrupt_newest(target, sid, '{"role": "user", "content": "spaced out"}')
    problems = check_history(await read_history(target, sid), ledger)
    assert any("not the canonical JSON a session stores" in p for p in problems), problems


def _at(seconds: float) -> datetime:
    return datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds)


def test_the_checker_reports_interleaved_batches_holes_and_stale_metadata() -> None:
    rows = [
        RawRow(1, "a", '{"n":1}'),
        RawRow(2, "b", '{"n":2}'),
        RawRow(3, "a", '{"n":3}'),  # batch a on both sides of b
        RawRow(5, "a", '{"n":4}'),  # a hole inside batch a
    ]
    session = RawSession("s", rows, (4, 6, _at(0), _at(10)), [("a", _at(20))])
    history = check_rows(session)
    assert len(history) == 4
    text = "\n".join(history.problems)
    assert "batch a: rows on both sides of batch b (seq 3; not contiguous)" in text, text
    assert "batch a: a hole between seq 3 and 5 inside the batch" in text, text
    assert "updated_at 2026-01-01 00:00:10+00:00 older than the newest commit" in text, text
    orphan = check_rows(RawSession("t", rows[:1], None, []))
    assert orphan.problems == [
        "raw rows of 't': 1 row(s) and 0 batch record(s) but no metadata row"
    ]

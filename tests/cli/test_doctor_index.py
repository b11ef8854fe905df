"""``sessions doctor`` and the turn index: counts that disagree with the rows are named,
and ``--repair`` recomputes them from the rows, on SQLite and PostgreSQL.

The counts (docs/turns.md, "The turn index") are corrupted with raw SQL in stores the
package wrote (turns, a pop, a rewind); the command runs as a child process (as in
tests/cli/test_doctor.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sessions import Store
from sessions._model.turnindex import (
    IndexMismatch,
    TurnIndexFacts,
    TurnIndexRecord,
    index_mismatches,
    turn_index_of,
)
from sessions._tools.doctor import check_store
from sessions.errors import StorageError
from tests.conftest import Target
from tests.contract.test_turn_index import assert_exact
from tests.helpers import msg

from .test_cli import cli
from .test_doctor import _report

WEIRD = "idx\x1b[31m[bold]\u202e"  # shown escaped in the text report
POPPED, REWOUND, CLEAN = "idx-popped", WEIRD, "idx-clean"

#: ``(session, what, first_key, hidden, stored, expected)`` planted by :func:`_corrupt`.
PLANTED = {
    (POPPED, "turn_count", None, False, 5, 3),
    (POPPED, "items", 5, False, 2, 1),
    (REWOUND, "turn_items", None, False, 6, 2),
    (REWOUND, "items", 3, True, 0, 2),
}


async def _write(store: Store[Any]) -> None:
    """Three sessions of three turns of two items (keys 1..2, 3..4, 5..6); then the
    newest item of POPPED is popped and REWOUND is rewound to its first turn."""
    for sid in (POPPED, REWOUND, CLEAN):
        session = store.session(sid)
        for turn in range(3):
            await session.add_items([msg(f"t{turn}.{i}") for i in range(2)])
            await session.commit()
    popped = store.session(POPPED)
    await popped.pop_item()
    await popped.commit()
    assert await store.session(REWOUND).rewind(to_turn=1) == 2


async def _set(
    db: Target, table: str, column: str, value: int, sid: str, first: int | None
) -> None:
    p = [db.param(n) for n in (1, 2, 3)]
    where = f"session_id = {p[1]}" + ("" if first is None else f" AND first_seq = {p[2]}")
    args = (value, sid) if first is None else (value, sid, first)
    await db.execute(f"UPDATE {db.table(table)} SET {column} = {p[0]} WHERE {where}", *args)


async def _corrupt(db: Target) -> None:
    """Plant :data:`PLANTED` in the stored counts, straight in SQL."""
    for sid, what, first, _hidden, stored, _expected in PLANTED:
        if first is None:
            await _set(db, "sessions", what, stored, sid, None)
        else:
            await _set(db, "turns", "items", stored, sid, first)


def _mismatches(report: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {
        (e["session_id"], m["what"], m["first_key"], m["hidden"], m["stored"], m["expected"])
        for e in report["sessions"]
        for m in e["turn_index"]
    }


@pytest.fixture
async def corrupted(target: Target, tmp_path: Path) -> Target:
    db = target.fresh(tmp_path)
    await _write(await db.open())
    await _corrupt(db)
    return db


async def test_doctor_names_every_count_that_disagrees_with_the_rows_and_repair_recomputes_them(
    corrupted: Target,
) -> None:
    db = corrupted
    store = await db.open()
    versions = {sid: (await store.session_info(sid)) for sid in (POPPED, REWOUND, CLEAN)}

    scan = await cli("doctor", "--json", "--db", db.url)
    report = _report(scan)
    assert scan.code == 1, scan.out  # wrong counts remain
    assert _mismatches(report) == PLANTED
    assert report["problems_found"] == 0  # the rows themselves are fine
    assert (report["turn_index_sessions"], report["turn_index_remaining"]) == (2, 2)
    assert report["clean"] is False

    repaired = await cli("doctor", "--repair", "--json", "--db", db.url)
    after = _report(repaired)
    assert repaired.code == 0, repaired.out
    assert _mismatches(after) == PLANTED  # what was found, and recomputed
    assert {e["session_id"] for e in after["sessions"] if e["turn_index_repaired"]} == {
        POPPED,
        REWOUND,
    }
    assert (after["turn_index_repaired"], after["turn_index_remaining"]) == (2, 0)
    assert after["clean"] is True

    # The index answers again, exactly what the full path does; nothing else changed.
    assert [t.items for t in await assert_exact(store, POPPED)] == [2, 2, 1]
    assert [t.items for t in await assert_exact(store, REWOUND)] == [2]
    for sid, info in versions.items():
        assert await store.session_info(sid) == info  # no version, no updated_at
    backend: Any = store.backend
    facts = await backend.load_turn_index(REWOUND)
    assert facts is not None and index_mismatches(facts) == []
    assert [(r.first_key, r.hidden, r.items) for r in facts.records] == [
        (1, False, 2),
        (3, True, 2),
        (5, True, 2),
    ]
    assert await store.session(REWOUND).undo_rewind() == 2  # the hidden counts come back
    assert [t.items for t in await assert_exact(store, REWOUND)] == [2, 2, 2]

    again = await cli("doctor", "--repair", "--json", "--db", db.url)
    clean = _report(again)
    assert again.code == 0 and clean["clean"] is True
    assert _mismatches(clean) == set() and clean["turn_index_sessions"] == 0
    assert clean["turn_index_repaired"] == 0  # a rerun recomputes nothing


async def test_the_text_report_names_the_session_literally_and_each_wrong_count(
    corrupted: Target,
) -> None:
    text = await cli("doctor", "--db", corrupted.url)
    assert text.code == 1, text.err
    assert "\x1b" not in text.out and "\u202e" not in text.out
    assert "session idx\\x1b[31m[bold]\\u202e: turn index disagrees with the rows (2 counts)" in (
        text.out
    )
    assert "  turn record 3..4, hidden: items is 0, the rows say 2" in text.out
    assert "  turn_items is 6, the rows say 2" in text.out
    assert f"session {POPPED}: turn index disagrees with the rows (2 counts)" in text.out
    assert "  turn_count is 5, the rows say 3" in text.out
    assert "  turn record 5..6: items is 2, the rows say 1" in text.out
    assert CLEAN not in text.out
    assert "turn index of 2 sessions disagrees with the rows" in text.out
    assert "2 sessions with a wrong turn index remain; --repair recomputes them" in text.out

    one = await cli("doctor", POPPED, "--repair", "--db", corrupted.url)
    assert one.code == 0, one.out
    assert "  repaired: turn index recomputed from the rows" in one.out
    assert "recomputed the turn index of 1 session" in one.out
    assert one.out.rstrip().endswith("clean: no stored history the API would reject")
    rest = _report(await cli("doctor", "--json", "--db", corrupted.url))
    assert {m[0] for m in _mismatches(rest)} == {REWOUND}  # only the session given


async def test_a_repair_recomputes_from_the_rows_inside_its_own_transaction(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn committed between the check and the repair is counted: the repair reads
    the rows again inside its transaction, not what the check read."""
    db = target.fresh(tmp_path)
    store = await db.open()
    await _write(store)
    await _corrupt(db)
    backend: Any = store.backend
    real = backend.load_turn_index

    async def with_a_commit_after(session_id: str) -> TurnIndexFacts | None:
        facts: TurnIndexFacts | None = await real(session_id)
        session = store.session(session_id)
        await session.add_items([msg("late.0"), msg("late.1"), msg("late.2")])
        await session.commit()
        return facts

    monkeypatch.setattr(backend, "load_turn_index", with_a_commit_after)
    checks = [c async for c in check_store(store, session_id=POPPED, repair=True)]
    assert checks[0].index_repaired and checks[0].index_remaining == []
    assert {m.what for m in checks[0].index} == {"turn_count", "items"}
    monkeypatch.undo()
    assert [t.items for t in await assert_exact(store, POPPED)] == [2, 2, 1, 3]


async def test_one_repair_run_quarantines_bad_rows_then_recomputes_the_index(
    target: Target, tmp_path: Path
) -> None:
    """The rows' repair pops through the commit path (which keeps the counts as they
    were, wrong by as much); the index is checked after it and recomputed."""
    from sessions._engine.commit import write_batches
    from sessions._model.backend import Batch, TurnRecord

    db = target.fresh(tmp_path)
    store = await db.open()
    await _write(store)
    orphan = '{"type":"function_call_output","call_id":"ghost","output":"?"}'
    await write_batches(store, CLEAN, [Batch("raw-1", False, (), (orphan,), turn=TurnRecord())])
    await _set(db, "sessions", "turn_count", 9, CLEAN, None)  # the rows say 4
    checks = [c async for c in check_store(store, session_id=CLEAN, repair=True)]
    check = checks[0]
    assert [(p.key, p.kind) for p in check.repaired] == [(7, "orphan_output")]
    assert check.index == [IndexMismatch("turn_count", 8, 3)]  # judged after the pop
    assert check.index_repaired and check.remaining == [] and check.index_remaining == []
    assert [t.items for t in await assert_exact(store, CLEAN)] == [2, 2, 2]


async def test_a_failed_index_repair_is_reported_and_the_mismatches_remain(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = target.fresh(tmp_path)
    store = await db.open()
    await _write(store)
    await _corrupt(db)

    async def refuse(session_id: str) -> None:
        raise StorageError("disk on fire")

    monkeypatch.setattr(store.backend, "repair_turn_index", refuse)
    checks = [c async for c in check_store(store, repair=True)]
    wrong = {c.session_id: c for c in checks if c.index}
    assert set(wrong) == {POPPED, REWOUND}
    for check in wrong.values():
        assert check.index_error is not None and "disk on fire" in check.index_error
        assert not check.index_repaired and check.index_remaining == check.index


async def test_an_unknown_session_has_no_index_and_its_repair_writes_nothing(
    store: Store[Any], sid: str
) -> None:
    backend: Any = store.backend
    assert await backend.load_turn_index(sid) is None
    assert await backend.repair_turn_index(sid) is None
    assert await store.session_info(sid) is None  # no session row made


async def test_a_session_without_turn_records_has_an_index_of_zeros(
    store: Store[Any], sid: str
) -> None:
    from sessions._engine.commit import write_batches
    from sessions._model.backend import Batch

    await write_batches(store, sid, [Batch("raw-1", False, (), ('{"role":"user"}',))])
    facts = await store.backend.load_turn_index(sid)  # type: ignore[attr-defined]
    assert facts == TurnIndexFacts(0, 0, ())
    assert index_mismatches(facts) == []


def _record(first: int, last: int, hidden: bool, items: int, stored: int, hid: int) -> Any:
    return TurnIndexRecord(first, last, hidden, items, stored, hid)


def test_the_rule_counts_visible_records_by_stored_items_and_hidden_ones_by_hidden_items() -> None:
    facts = TurnIndexFacts(
        turn_count=3,
        turn_items=7,
        records=(
            _record(1, 3, False, 3, 3, 0),
            _record(4, 5, False, 2, 0, 0),  # emptied by pops: no turn, 0 items
            _record(6, 9, False, 4, 2, 0),  # two of four popped
            _record(10, 11, True, 2, 0, 2),  # hidden: its hidden items
            _record(12, 12, True, 0, 1, 1),  # hidden: a visible row in its range not counted
        ),
    )
    want = turn_index_of(facts)
    assert (want.turn_count, want.turn_items, want.items) == (2, 5, (3, 0, 2, 2, 1))
    assert index_mismatches(facts) == [
        IndexMismatch("turn_count", 3, 2),
        IndexMismatch("turn_items", 7, 5),
        IndexMismatch("items", 2, 0, 4, 5),
        IndexMismatch("items", 4, 2, 6, 9),
        IndexMismatch("items", 0, 1, 12, 12, hidden=True),
    ]
    assert index_mismatches(facts)[-1].message == (
        "turn record 12..12, hidden: items is 0, the rows say 1"
    )
    fixed = tuple(replace(r, items=n) for r, n in zip(facts.records, want.items, strict=True))
    assert index_mismatches(TurnIndexFacts(2, 5, fixed)) == []

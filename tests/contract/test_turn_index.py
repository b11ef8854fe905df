"""The turn index (docs/turns.md): per turn record the items it holds, per session the
records holding items and their items, kept by every write in its transaction, so that
``turns()``, ``get_items(turns=N)``, ``rewind`` and ``fork`` read turn records, not the
key of every stored item.

Each test compares what the index answers (``TurnBackend.load_turn_window``) with the
full path (every record and every key, ``build_turns``), and the public reads with what
the history holds. ``tstore``: SQLite, PostgreSQL and the memory backend; ``target``:
the SQL backends (raw SQL).
"""

from __future__ import annotations

from typing import Any

import pytest

from sessions import Store, Turn
from sessions._model.backend import Batch, new_batch_id
from sessions._model.turns import build_turns, window_turns
from sessions.errors import CommitConflictError
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.contract.raw import forget_turn_records
from tests.helpers import msg


def shape(turns: list[Turn]) -> list[tuple[int, int]]:
    return [(t.number, t.items) for t in turns]


async def commit_turns(session: Any, *sizes: int) -> None:
    """One commit per size, each adding that many items named ``t<turn>.<i>``."""
    done = len(await session.turns())
    for n, size in enumerate(sizes, start=done + 1):
        await session.add_items([msg(f"t{n}.{i}") for i in range(size)])
        await session.commit()


async def full_path(store: Store[Any], sid: str) -> list[Turn]:
    records, keys = await store.backend.load_turns(sid)
    return build_turns(records, keys, clear=False, pops=(), staged=0)


async def indexed(store: Store[Any], sid: str) -> list[Turn] | None:
    """Every turn as the index answers, ``None`` when it is not exact."""
    window = await store.backend.load_turn_window(sid)
    return None if window is None else window_turns(window, newest=False)


async def assert_exact(store: Store[Any], sid: str) -> list[Turn]:
    """The index answers, and exactly what the full path does (keys, counts, times)."""
    every = await full_path(store, sid)
    assert await indexed(store, sid) == every
    for n in range(len(every) + 2):
        newest = await store.backend.load_turn_window(sid, newest=n)
        oldest = await store.backend.load_turn_window(sid, oldest=n)
        assert newest is not None and oldest is not None
        assert newest.count == oldest.count == len(every)
        assert window_turns(newest, newest=True) == every[max(len(every) - n, 0) :]
        assert window_turns(oldest, newest=False) == every[:n]
    return every


async def test_a_pop_that_empties_a_turn_then_a_new_commit_keep_the_index_exact(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 3)
    for _ in range(3):
        await session.pop_item()
    await session.commit()  # turn 2 emptied: gone, its record stays (its usage counts)
    assert shape(await assert_exact(tstore, sid)) == [(1, 2)]
    assert await session.get_items(turns=1) == [msg("t1.0"), msg("t1.1")]
    await commit_turns(session, 1)
    assert shape(await assert_exact(tstore, sid)) == [(1, 2), (2, 1)]
    assert await tstore.session(sid).get_items(turns=1) == [msg("t2.0")]
    await session.pop_item()
    await session.pop_item()
    await session.commit()  # turn 2 emptied again, turn 1 shrinks
    await commit_turns(session, 2)
    every = await assert_exact(tstore, sid)
    assert shape(every) == [(1, 1), (2, 2)]
    assert every[0].last_key == every[0].first_key


async def test_pops_at_the_start_and_in_the_middle_of_turns_narrow_their_keys(
    tstore: Store[Any], sid: str
) -> None:
    """The doctor pops rows anywhere, compaction's pruning pops the oldest: a turn's
    first and last keys are those of the items it still holds."""
    session = tstore.session(sid)
    await commit_turns(session, 3, 3)
    before = await assert_exact(tstore, sid)
    first = before[0].first_key
    middle = before[1].first_key
    assert first is not None and middle is not None
    await tstore.backend.apply(sid, [Batch(new_batch_id(), False, (first, middle + 1), ())])
    every = await assert_exact(tstore, sid)
    assert [(t.first_key, t.last_key, t.items) for t in every] == [
        (first + 1, first + 2, 2),
        (middle, middle + 2, 2),
    ]
    assert await tstore.session(sid).get_items(turns=1) == [msg("t2.0"), msg("t2.2")]


async def test_rewind_and_undo_rewind_move_whole_turns_out_of_the_index_and_back(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 1, 3, 2)
    whole = await assert_exact(tstore, sid)
    assert await session.rewind(to_turn=2) == 2
    assert shape(await assert_exact(tstore, sid)) == [(1, 2), (2, 1)]
    assert await session.get_items(turns=5) == [msg("t1.0"), msg("t1.1"), msg("t2.0")]
    assert await session.rewind(to_turn=0) == 2
    assert await assert_exact(tstore, sid) == []
    assert await session.undo_rewind() == 2
    assert await session.undo_rewind() == 2
    assert await assert_exact(tstore, sid) == whole
    assert len(await session.get_items(turns=2)) == 5


async def test_a_clear_empties_the_index_and_a_clear_with_items_starts_it_again(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 2)
    await session.rewind(to_turn=1)
    await session.clear_session()
    await session.commit()
    assert await assert_exact(tstore, sid) == []
    await session.clear_session()
    await session.add_items([msg("after")])
    await session.commit()  # one batch: the clear, then one turn
    assert shape(await assert_exact(tstore, sid)) == [(1, 1)]
    assert await session.undo_rewind() == 0  # the clear removed the hidden turn for good


async def test_a_fork_of_a_popped_history_copies_the_turns_reads_see(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 2, 2)
    for _ in range(3):
        await session.pop_item()
    await session.commit()  # turn 3 emptied, turn 2 holds one item
    assert shape(await assert_exact(tstore, sid)) == [(1, 2), (2, 1)]
    assert await session.fork(f"{sid}-a", at_turn=2) == 2
    fork = tstore.session(f"{sid}-a")
    assert shape(await assert_exact(tstore, f"{sid}-a")) == [(1, 2), (2, 1)]
    assert await fork.get_items() == [msg("t1.0"), msg("t1.1"), msg("t2.0")]
    assert await session.fork(f"{sid}-b", at_turn=1) == 1
    assert await tstore.session(f"{sid}-b").get_items() == [msg("t1.0"), msg("t1.1")]
    assert await session.fork(f"{sid}-a", at_turn=2) == 2  # the same fork again: nothing


async def assert_tails(session: Any) -> list[Turn]:
    """``turns(last=n)`` is ``turns()[-n:]`` for every ``n`` (``0``: none)."""
    every = await session.turns()
    for n in range(len(every) + 2):
        assert await session.turns(last=n) == (every[-n:] if n else [])
    return every


async def test_turns_last_n_is_the_tail_of_turns_whatever_is_staged_or_rewound(
    tstore: Store[Any], sid: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 2, 1, 3, 2)
    assert shape(await assert_tails(session)) == [(1, 2), (2, 1), (3, 3), (4, 2)]
    assert shape(await session.turns(last=2)) == [(3, 3), (4, 2)]
    await session.add_items([msg("staged")])  # a pending turn: the newest
    every = await assert_tails(session)
    assert [(t.number, t.pending) for t in every[-2:]] == [(4, False), (5, True)]
    await session.rollback()
    await session.pop_item()  # a staged pop: read through the full path
    await session.pop_item()
    assert shape(await assert_tails(session)) == [(1, 2), (2, 1), (3, 3)]
    await session.commit()
    await session.rewind(to_turn=2)
    assert shape(await assert_tails(session)) == [(1, 2), (2, 1)]
    await session.undo_rewind()
    assert shape(await session.turns(last=1)) == [(3, 3)]


@pytest.mark.parametrize(
    ("last", "error", "words"),
    [(-1, ValueError, "last"), ("2", TypeError, "last must be an int"), (True, TypeError, "bool")],
)
async def test_turns_refuses_a_last_that_is_not_a_count(
    tstore: Store[Any], sid: str, last: object, error: type[Exception], words: str
) -> None:
    session = tstore.session(sid)
    await commit_turns(session, 1)
    with pytest.raises(error, match=words):
        await session.turns(last=last)  # type: ignore[arg-type]
    assert shape(await session.turns()) == [(1, 1)]


async def test_history_no_turn_record_covers_reads_through_the_full_path(
    store: Store[Any], target: Target, sid: str
) -> None:
    """A store from before turn records (or an import): the index is not exact, and
    every turn operation reads every key, as before, with the same answers."""
    session = store.session(sid)
    await commit_turns(session, 2, 3)
    await forget_turn_records(target, sid)
    assert await indexed(store, sid) is None
    await commit_turns(session, 1, 2)
    assert await indexed(store, sid) is None  # the old items are still not covered
    assert shape(await session.turns()) == [(1, 5), (2, 1), (3, 2)]
    assert shape(await session.turns(last=2)) == [(2, 1), (3, 2)]
    assert await session.get_items(turns=1) == [msg("t3.0"), msg("t3.1")]
    assert len(await session.get_items(turns=3)) == 8
    assert await session.fork(f"{sid}-f", at_turn=2) == 2
    assert shape(await assert_exact(store, f"{sid}-f")) == [(1, 5), (2, 1)]
    assert await session.rewind(to_turn=1) == 2
    assert shape(await session.turns()) == [(1, 5)]
    assert await session.undo_rewind() == 2
    assert shape(await session.turns()) == [(1, 5), (2, 1), (3, 2)]
    await session.clear_session()
    await commit_turns(session, 1)
    assert shape(await assert_exact(store, sid)) == [(1, 1)]  # covered again


async def test_migration_7_backfills_the_turn_index_of_a_store_from_version_6(
    target: Target, sid: str
) -> None:
    """Popped, emptied, hidden and uncovered items: the schema as version 6 left it,
    reopened, reads the same turns, and exact where every item is covered."""
    store = await target.open()
    session = store.session(sid)
    await commit_turns(session, 2, 3, 1, 2)
    for _ in range(3):
        await session.pop_item()
    await session.commit()  # turn 4 emptied, turn 3 emptied
    await commit_turns(session, 2, 1)
    await session.rewind(to_turn=3)  # turn 4 hidden
    legacy = f"{sid}-legacy"
    await commit_turns(store.session(legacy), 2)
    await forget_turn_records(target, legacy)
    await commit_turns(store.session(legacy), 1)
    expected = await full_path(store, sid)
    expected_legacy = await full_path(store, legacy)
    await store.close()
    for sql in (
        f"ALTER TABLE {target.table('turns')} DROP COLUMN items",
        f"ALTER TABLE {target.table('sessions')} DROP COLUMN turn_count",
        f"ALTER TABLE {target.table('sessions')} DROP COLUMN turn_items",
        f"DELETE FROM {target.schema_table} WHERE version = 7",
    ):
        await target.execute(sql)
    store = await target.open()
    assert shape(expected) == [(1, 2), (2, 3), (3, 2)]
    assert await assert_exact(store, sid) == expected
    assert await indexed(store, legacy) is None
    assert await full_path(store, legacy) == expected_legacy
    session = store.session(sid)
    assert await session.undo_rewind() == 1
    assert shape(await assert_exact(store, sid)) == [(1, 2), (2, 3), (3, 2), (4, 1)]
    assert await session.get_items(turns=1) == [msg("t4.0")]


async def test_a_cut_near_the_start_reads_the_kept_turns_first_and_still_refuses_a_split(
    tstore: Store[Any], sid: str
) -> None:
    """A fork or rewind at an early turn of a long history reads the turns it keeps,
    and the later ones only when a call is left open there: a call in turn 1 whose
    output is in turn 2 still refuses the cut after turn 1, nothing applied."""
    session = tstore.session(sid)
    fcall = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    fout = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    for items in ([msg("q"), fcall], [fout, msg("a", "assistant")], [msg("t3")], [msg("t4")]):
        await session.add_items(items)
        await session.commit()
    split = r"turn 1 of session .* splits a tool call from its output: function_call 'c1'"
    with pytest.raises(ValueError, match=r"fork\(\): " + split):
        await session.fork(f"{sid}-f1", at_turn=1)
    with pytest.raises(ValueError, match=r"rewind\(\): " + split):
        await session.rewind(to_turn=1)
    assert shape(await assert_exact(tstore, sid)) == [(1, 2), (2, 2), (3, 1), (4, 1)]
    assert await session.fork(f"{sid}-f2", at_turn=2) == 2  # the pair whole: no split
    assert await tstore.session(f"{sid}-f2").get_items() == [
        msg("q"),
        fcall,
        fout,
        msg("a", "assistant"),
    ]
    assert await session.rewind(to_turn=2) == 2


async def test_a_turn_committed_between_the_reads_of_a_rewind_refuses_it(
    tstore: Store[Any], sid: str
) -> None:
    """A rewind reads the turn count, then the turns it hides: another writer's turn
    in between is a CommitConflictError, nothing applied."""
    session = tstore.session(sid)
    await commit_turns(session, 1, 1, 1)
    proxy = install_proxy(tstore)
    inner = proxy.inner
    calls = 0

    async def load_turn_window(session_id: str, **window: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            await commit_turns(other, 1)
        return await inner.load_turn_window(session_id, **window)

    other = tstore.session(sid)
    proxy.load_turn_window = load_turn_window  # type: ignore[method-assign]
    with pytest.raises(CommitConflictError, match="changed its turns while they were read"):
        await session.rewind(to_turn=1)
    del proxy.load_turn_window
    assert shape(await assert_exact(tstore, sid)) == [(1, 1), (2, 1), (3, 1), (4, 1)]
    assert await session.rewind(to_turn=1) == 3

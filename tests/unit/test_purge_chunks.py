"""How purge cuts a listed page into delete transactions (sessions._engine.store._chunks)."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given
from hypothesis import strategies as st

from sessions import SessionInfo
from sessions._engine.store import PURGE_ITEMS, PURGE_SESSIONS, _chunks

_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _info(i: int, items: int) -> SessionInfo:
    return SessionInfo(f"s{i:05d}", items, _NOW, _NOW)


@given(st.lists(st.integers(min_value=0, max_value=3 * PURGE_ITEMS), max_size=400))
def test_chunks_keep_order_and_stay_within_purge_sessions_and_purge_items(
    sizes: list[int],
) -> None:
    page = [_info(i, n) for i, n in enumerate(sizes)]
    chunks = _chunks(page)
    assert [info for chunk in chunks for info in chunk] == page
    for chunk in chunks:
        assert 1 <= len(chunk) <= PURGE_SESSIONS
        total = sum(info.item_count for info in chunk)
        # Over the item bound only as a single session larger than it.
        assert total <= PURGE_ITEMS or len(chunk) == 1


def test_a_page_of_small_sessions_takes_one_transaction_per_purge_sessions() -> None:
    page = [_info(i, 20) for i in range(2 * PURGE_SESSIONS + 1)]
    assert [len(chunk) for chunk in _chunks(page)] == [PURGE_SESSIONS, PURGE_SESSIONS, 1]


def test_a_session_that_would_pass_purge_items_starts_the_next_transaction() -> None:
    half = PURGE_ITEMS // 2
    page = [_info(0, half), _info(1, half), _info(2, 1), _info(3, PURGE_ITEMS + 5)]
    assert [[i.session_id for i in c] for c in _chunks(page)] == [
        ["s00000", "s00001"],
        ["s00002"],
        ["s00003"],
    ]

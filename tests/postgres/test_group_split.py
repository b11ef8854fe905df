"""How the PostgreSQL backend cuts waiting commits into groups (``_Grouper.take``):
arrival order, the statement's bounds, and one send's share of the commits waiting and
in flight once there are many of them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions import Batch
from sessions._engine.group import Entry

pg_group = pytest.importorskip("sessions.postgres.group")  # needs asyncpg

_Grouper = pg_group._Grouper


def _entry(number: int, items: int = 1) -> object:
    return Entry(f"s{number}", [Batch(f"b{number}", False, (), ("{}",) * items)])


def _grouper(limit: int, waiting: int, in_flight: int = 0, items: int = 1) -> object:
    grouper = _Grouper(limit)
    grouper.pending.extend(_entry(n, items) for n in range(waiting))
    if in_flight:
        grouper.start(in_flight)
    return grouper


def test_a_group_takes_one_sends_share_of_many_waiting_commits() -> None:
    grouper = _grouper(limit=2, waiting=100)
    first = grouper.take()
    assert [e.session_id for e in first] == [f"s{n}" for n in range(50)]
    grouper.start(len(first))
    second = grouper.take()
    assert [e.session_id for e in second] == [f"s{n}" for n in range(50, 100)]


def test_the_share_counts_the_commits_in_flight() -> None:
    grouper = _grouper(limit=2, waiting=40, in_flight=60)
    assert len(grouper.take()) == 40  # ceil((40 + 60) / 2) = 50: all 40 fit


def test_a_few_waiting_commits_leave_together_whatever_their_share() -> None:
    grouper = _grouper(limit=2, waiting=pg_group._GROUP_SPLIT_MIN, in_flight=0)
    assert len(grouper.take()) == pg_group._GROUP_SPLIT_MIN


@given(
    limit=st.integers(1, 8),
    waiting=st.integers(0, 600),
    in_flight=st.integers(0, 600),
    items=st.integers(1, 200),
)
def test_a_group_is_the_oldest_waiting_commits_within_every_bound(
    limit: int, waiting: int, in_flight: int, items: int
) -> None:
    grouper = _grouper(limit, waiting, in_flight, items)
    before = list(grouper.pending)
    group = grouper.take()
    assert group == before[: len(group)]  # a prefix: arrival order, nothing skipped
    assert list(grouper.pending) == before[len(group) :]
    if waiting:
        assert group, "a send never leaves empty while commits wait"
    share = -(-(waiting + in_flight) // limit)
    assert len(group) <= min(pg_group._GROUP_MAX_COMMITS, max(pg_group._GROUP_SPLIT_MIN, share))
    assert len(group) == 1 or len(group) * items <= pg_group._GROUP_MAX_ITEMS
    # Nothing held back below the bounds: the next waiting commit would break one.
    if grouper.pending:
        bound = min(pg_group._GROUP_MAX_COMMITS, max(pg_group._GROUP_SPLIT_MIN, share))
        assert len(group) == bound or (len(group) + 1) * items > pg_group._GROUP_MAX_ITEMS

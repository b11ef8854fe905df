"""Catalogue listing against a Python model, on both backends (hypothesis).

Generated sessions (user, tags, age) in a fresh store per example; for generated
filters (user, tag, updated_after) and page sizes, ``list_sessions`` paged to the end
and ``count_sessions`` must give exactly what filtering the model gives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions import Store, open_store
from tests.conftest import BACKENDS, Target, make_target

USERS = ["u1", "u2", "u3"]
TAGS = ["a", "b", "c"]


@dataclass(frozen=True)
class Entry:
    user: str | None
    tags: frozenset[str]
    age_hours: int  # updated_at this many hours ago


_entries = st.lists(
    st.builds(
        Entry,
        st.one_of(st.none(), st.sampled_from(USERS)),
        st.frozensets(st.sampled_from(TAGS), max_size=3),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=12,
)
_filters = st.tuples(
    st.one_of(st.none(), st.sampled_from([*USERS, "nobody"])),
    st.one_of(st.none(), st.sampled_from([*TAGS, "zzz"])),
    st.one_of(st.none(), st.integers(min_value=0, max_value=6)),
    st.integers(min_value=1, max_value=5),
)


@pytest.fixture(params=BACKENDS)
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Target]:
    """Makes an empty store (a new file, or a new table prefix) for each example."""
    target = make_target(request.param, tmp_path, request)
    return lambda: target.fresh(tmp_path)


async def _seed(store: Store[Any], target: Target, entries: list[Entry]) -> None:
    for n, entry in enumerate(entries):
        session = store.session(f"s{n:02d}")
        session.set_info(user_id=entry.user, tags=entry.tags)
        await session.commit()
        if entry.age_hours:
            moved = target.ago("updated_at", entry.age_hours * 3600)
            await target.execute(
                f"UPDATE {target.table('sessions')} SET updated_at = {moved} "
                f"WHERE session_id = {target.param(1)}",
                f"s{n:02d}",
            )


async def _listed(store: Store[Any], page: int, **where: Any) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        chunk = await store.list_sessions(limit=page, after=after, **where)
        seen += [info.session_id for info in chunk]
        if len(chunk) < page:
            return seen
        after = chunk[-1].session_id


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(entries=_entries, filters=st.lists(_filters, min_size=1, max_size=4))
def test_filtered_listing_and_counts_match_a_python_model(
    fresh_url: Callable[[], Target], entries: list[Entry], filters: list[tuple[Any, ...]]
) -> None:
    target = fresh_url()
    url = target.url

    async def check() -> None:
        store = await open_store(url)
        try:
            await _seed(store, target, entries)
            now = datetime.now(timezone.utc)
            for user, tag, hours, page in filters:
                # Half an hour off the generated ages, so no session sits on the edge.
                after = None if hours is None else now - timedelta(hours=hours, minutes=30)
                expected = [
                    f"s{n:02d}"
                    for n, e in enumerate(entries)
                    if (user is None or e.user == user)
                    and (tag is None or tag in e.tags)
                    and (hours is None or e.age_hours <= hours)
                ]
                where = {"user_id": user, "tag": tag, "updated_after": after}
                assert await _listed(store, page, **where) == expected, where
                assert await store.count_sessions(**where) == len(expected), where
        finally:
            await store.close()

    asyncio.run(check())

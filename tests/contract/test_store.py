"""Store operations on every backend: listing, metadata, delete, purge, batch-record pruning."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sessions import Store
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.helpers import committed, msg


async def test_list_sessions_pages_in_id_order(store: Store[Any], sid: str) -> None:
    ids = [f"{sid}-{i:02d}" for i in range(7)]
    for session_id in reversed(ids):
        session = store.session(session_id)
        await session.add_items([msg(session_id)])
        await session.commit()
    seen = [info.session_id async for info in store.iter_sessions(page_size=3)]
    assert [s for s in seen if s.startswith(sid)] == ids
    page = await store.list_sessions(limit=2, after=ids[2])
    assert [info.session_id for info in page] == ids[3:5]
    with pytest.raises(ValueError, match="limit"):
        await store.list_sessions(limit=0)


async def test_delete_session_removes_history_and_metadata(store: Store[Any], sid: str) -> None:
    await committed(store, sid, "1")
    assert (await store.session_info(sid)) is not None
    assert await store.delete_session(sid) is True
    assert await store.delete_session(sid) is False
    assert await store.session_info(sid) is None
    assert await store.session(sid).get_items() == []


async def test_purge_removes_only_stale_sessions_and_dry_run_removes_nothing(
    store: Store[Any], target: Target, sid: str
) -> None:
    old, fresh = f"{sid}-old", f"{sid}-fresh"
    for session_id in (old, fresh):
        session = store.session(session_id)
        await session.add_items([msg(session_id)])
        await session.commit()
    past = target.epoch("1000000000")
    await target.execute(
        f"UPDATE txs_sessions SET updated_at = {past} WHERE session_id = {target.param(1)}",
        old,
    )
    would = await store.purge(timedelta(days=30), dry_run=True)
    assert old in {i.session_id for i in would} and fresh not in {i.session_id for i in would}
    assert await store.session(old).get_items() == [msg(old)]
    gone = await store.purge(timedelta(days=30))
    assert old in {i.session_id for i in gone}
    assert await store.session(old).get_items() == []
    assert await store.session(fresh).get_items() == [msg(fresh)]
    with pytest.raises(ValueError, match="older_than"):
        await store.purge(timedelta(days=-1))
    with pytest.raises(ValueError, match="page_size"):
        await store.purge(timedelta(days=1), page_size=0)


async def test_purge_works_through_many_pages(store: Store[Any], target: Target, sid: str) -> None:
    ids = [f"{sid}-{i}" for i in range(7)]
    await _stale(store, target, ids)
    gone = await store.purge(timedelta(days=30), page_size=2)
    assert sorted(i.session_id for i in gone if i.session_id.startswith(sid)) == ids
    for session_id in ids:
        assert await store.session_info(session_id) is None


async def _stale(store: Store[Any], target: Target, ids: list[str]) -> None:
    past = target.epoch("1000000000")
    for session_id in ids:
        session = store.session(session_id)
        await session.add_items([msg(session_id)])
        await session.commit()
        await target.execute(
            f"UPDATE txs_sessions SET updated_at = {past} WHERE session_id = {target.param(1)}",
            session_id,
        )


async def test_purge_deletes_a_page_in_several_transactions_of_at_most_purge_sessions(
    store: Store[Any], target: Target, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sessions._engine.store as store_module

    ids = [f"{sid}-{i}" for i in range(7)]
    await _stale(store, target, ids)
    backend: Any = store.backend
    calls: list[list[str]] = []
    delete_stale = backend.delete_stale

    async def counted(session_ids: list[str], stale_before: Any) -> list[str]:
        calls.append(list(session_ids))
        deleted: list[str] = await delete_stale(session_ids, stale_before)
        return deleted

    monkeypatch.setattr(backend, "delete_stale", counted)
    monkeypatch.setattr(store_module, "PURGE_SESSIONS", 3)
    gone = await store.purge(timedelta(days=30))  # one page (500) holds all 7
    assert sorted(i.session_id for i in gone if i.session_id.startswith(sid)) == ids
    assert all(len(call) <= 3 for call in calls)
    assert sorted(s for call in calls for s in call if s.startswith(sid)) == ids
    assert len([call for call in calls if any(s.startswith(sid) for s in call)]) >= 3
    for session_id in ids:
        assert await store.session_info(session_id) is None


async def test_delete_stale_keeps_a_session_written_after_it_was_listed_and_deletes_the_rest(
    store: Store[Any], target: Target, sid: str
) -> None:
    from datetime import datetime, timezone

    ids = [f"{sid}-{i}" for i in range(4)]
    await _stale(store, target, ids)
    cutoff = datetime.now(timezone.utc) - timedelta(days=30)
    backend: Any = store.backend
    listed = [i.session_id for i in await backend.stale_sessions(cutoff, limit=10_000)]
    assert set(ids) <= set(listed)
    written = store.session(ids[2])
    await written.add_items([msg("late")])
    await written.commit()
    deleted = await backend.delete_stale(ids, cutoff)
    assert sorted(deleted) == [ids[0], ids[1], ids[3]]
    assert await store.session(ids[2]).get_items() == [msg(ids[2]), msg("late")]
    for session_id in (ids[0], ids[1], ids[3]):
        assert await store.session_info(session_id) is None


async def test_pruning_batch_records_keeps_recent_ones(
    store: Store[Any], target: Target, sid: str
) -> None:
    session = await committed(store, sid, "1")
    assert await store.prune_batch_records(timedelta(days=1)) == 0  # too recent
    back = target.ago("committed_at", 2 * 86400)
    await target.execute(
        f"UPDATE txs_batches SET committed_at = {back} WHERE session_id = {target.param(1)}",
        sid,
    )
    assert await store.prune_batch_records(timedelta(days=1)) >= 1
    # History is untouched; only the idempotency records of old commits went.
    assert await session.get_items() == [msg("1")]
    await session.add_items([msg("2")])
    await session.commit()
    assert await session.get_items() == [msg("1"), msg("2")]


async def _make_stale(target: Target, store: Store[Any], ids: list[str]) -> None:
    for session_id in ids:
        session = store.session(session_id)
        await session.add_items([msg(session_id)])
        await session.commit()
    past = target.epoch("1000000000")
    for session_id in ids:
        await target.execute(
            f"UPDATE txs_sessions SET updated_at = {past} WHERE session_id = {target.param(1)}",
            session_id,
        )


async def _stale_and_proxied(
    target: Target, store: Store[Any], sid: str, n: int
) -> tuple[list[str], Any, Any]:
    """``n`` stale sessions, a proxy on the store's backend, and its real listing."""
    ids = [f"{sid}-{i}" for i in range(n)]
    await _make_stale(target, store, ids)
    proxy = install_proxy(store)
    return ids, proxy, proxy.inner.stale_sessions


async def test_purge_keeps_a_session_written_to_after_it_was_listed(
    store: Store[Any], target: Target, sid: str
) -> None:
    ids, proxy, listing = await _stale_and_proxied(target, store, sid, 3)

    async def list_then_write(*args: Any, **kwargs: Any) -> Any:
        page = await listing(*args, **kwargs)
        if any(info.session_id == ids[1] for info in page):
            revived = store.session(ids[1])  # a user comes back between list and delete
            await revived.add_items([msg("back")])
            await revived.commit()
        return page

    proxy.stale_sessions = list_then_write  # type: ignore[attr-defined]
    gone = await store.purge(timedelta(days=30))
    assert {i.session_id for i in gone} >= {ids[0], ids[2]}
    assert ids[1] not in {i.session_id for i in gone}
    assert await store.session(ids[1]).get_items() == [msg(ids[1]), msg("back")]
    assert await store.session_info(ids[0]) is None


async def test_purge_dry_run_lists_a_page_at_a_time(
    store: Store[Any], target: Target, sid: str
) -> None:
    ids, proxy, listing = await _stale_and_proxied(target, store, sid, 5)
    limits: list[int] = []

    async def spy(*args: Any, **kwargs: Any) -> Any:
        limits.append(kwargs["limit"])
        return await listing(*args, **kwargs)

    proxy.stale_sessions = spy  # type: ignore[attr-defined]
    would = await store.purge(timedelta(days=30), dry_run=True, page_size=2)
    assert sorted(i.session_id for i in would if i.session_id.startswith(sid)) == ids
    assert limits and set(limits) == {2} and len(limits) >= 3
    for session_id in ids:
        assert await store.session_info(session_id) is not None

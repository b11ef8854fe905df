"""Restoring an export: ``import_sessions(mode=...)`` never duplicates a history by
default, keeps the exported times, and says what it left alone (issue 11).

Both backends, real databases; the export files are made by ``export_sessions``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sessions import Store
from sessions._tools.transfer import ImportFileError, export_sessions, import_sessions
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.helpers import msg


async def commit(store: Store[Any], session_id: str, items: list[dict[str, Any]]) -> None:
    session = store.session(session_id)
    await session.add_items(items)
    await session.commit()


async def items_of(store: Store[Any], session_id: str) -> list[Any]:
    return await store.session(session_id).get_items()


async def set_times(target: Target, session_id: str, created: float, updated: float) -> None:
    """Give a session old, distinct times (epoch seconds), as a long-lived one has."""

    def at(n: int) -> str:
        return target.epoch(target.param(n))

    await target.execute(
        f"UPDATE txs_sessions SET created_at = {at(1)}, updated_at = {at(2)} "
        f"WHERE session_id = {target.param(3)}",
        created,
        updated,
        session_id,
    )


async def test_export_then_import_into_the_same_store_duplicates_nothing(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    await commit(store, f"{sid}-a", [msg("1"), msg("2")])
    await commit(store, f"{sid}-b", [msg("3")])
    path = str(tmp_path / "backup.jsonl")
    await export_sessions(store, path, [f"{sid}-a", f"{sid}-b"])
    result = await import_sessions(store, path)  # the default mode
    assert await items_of(store, f"{sid}-a") == [msg("1"), msg("2")]
    assert await items_of(store, f"{sid}-b") == [msg("3")]
    assert result.added == 0
    assert sorted(result.skipped) == [f"{sid}-a", f"{sid}-b"]
    assert result.skipped_items == 3


async def test_import_keeps_the_exported_created_and_updated_times(
    target: Target, tmp_path: Path, sid: str
) -> None:
    source = await target.open()
    await commit(source, sid, [msg("1"), msg("2")])
    await commit(source, f"{sid}-empty", [msg("x")])
    emptied = source.session(f"{sid}-empty")
    await emptied.clear_session()  # exists, without items
    await emptied.commit()
    await set_times(target, sid, 1_500_000_000.123456, 1_600_000_000.654321)
    await set_times(target, f"{sid}-empty", 1_500_000_100, 1_600_000_100)
    path = str(tmp_path / "backup.jsonl")
    await export_sessions(source, path, [sid, f"{sid}-empty"])
    before = {s: await source.session_info(s) for s in (sid, f"{sid}-empty")}
    for s in before:
        assert await source.delete_session(s)
    result = await import_sessions(source, path)
    for s, info in before.items():
        after = await source.session_info(s)
        assert info is not None and after is not None
        assert (after.created_at, after.updated_at) == (info.created_at, info.updated_at), s
        assert after.item_count == info.item_count
    assert await items_of(source, sid) == [msg("1"), msg("2")]
    assert result.added == 2 and not result.skipped


async def test_skip_mode_carries_on_with_an_import_that_was_interrupted(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    path = tmp_path / "export.jsonl"
    lines = [{"type": "header", "format": "txsessions-export", "version": 1}]
    lines.append({"type": "session", "session": sid})
    lines += [{"type": "item", "session": sid, "item": msg(str(i))} for i in range(7)]
    lines.append({"type": "end", "session": sid, "items": 7})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    proxy = install_proxy(store)

    async def die_at_the_third_chunk() -> None:
        if proxy.apply_calls == 4:  # marker, chunk 0-2, chunk 3-5, then this one
            raise asyncio.CancelledError()

    proxy.before_apply = die_at_the_third_chunk
    with pytest.raises(asyncio.CancelledError):
        await import_sessions(store, str(path), chunk_items=3)
    proxy.before_apply = None
    assert len(await items_of(store, sid)) == 6  # the session exists, partly imported
    result = await import_sessions(store, str(path), chunk_items=3)  # default mode: skip
    assert (result.added, result.already_present, result.skipped) == (1, 6, [])
    assert await items_of(store, sid) == [msg(str(i)) for i in range(7)]


async def test_skip_mode_leaves_a_grown_history_alone(
    target: Target, tmp_path: Path, sid: str
) -> None:
    """An old export imported, then a newer export of the same session (more items):
    the two share their first chunk; the session is left alone, never half-doubled."""
    source = await target.open()
    await commit(source, sid, [msg(str(i)) for i in range(5)])
    old = str(tmp_path / "old.jsonl")
    await export_sessions(source, old, [sid])
    await commit(source, sid, [msg("5"), msg("6")])
    new = str(tmp_path / "new.jsonl")
    await export_sessions(source, new, [sid])
    target_store = await target.open()
    await target_store.delete_session(sid)
    await import_sessions(target_store, old, chunk_items=5)
    result = await import_sessions(target_store, new, chunk_items=5)
    assert result.skipped == [sid] and result.added == 0
    assert await items_of(target_store, sid) == [msg(str(i)) for i in range(5)]
    replaced = await import_sessions(target_store, new, mode="replace", chunk_items=5)
    assert replaced.replaced == [sid] and replaced.added == 7
    assert await items_of(target_store, sid) == [msg(str(i)) for i in range(7)]


async def test_append_mode_adds_after_the_history_once(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    await commit(store, sid, [msg("mine")])
    path = tmp_path / "export.jsonl"
    lines = [
        {"type": "header", "format": "txsessions-export", "version": 1},
        {"type": "session", "session": sid},
        {"type": "item", "session": sid, "item": msg("theirs")},
        {"type": "end", "session": sid, "items": 1},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    info = await store.session_info(sid)
    first = await import_sessions(store, str(path), mode="append")
    assert (first.added, first.skipped) == (1, [])
    again = await import_sessions(store, str(path), mode="append")
    assert (again.added, again.already_present) == (0, 1)
    also_skip = await import_sessions(store, str(path))  # appended before: not "present"
    assert (also_skip.added, also_skip.skipped) == (0, [])
    assert await items_of(store, sid) == [msg("mine"), msg("theirs")]
    after = await store.session_info(sid)
    assert info is not None and after is not None
    assert after.created_at == info.created_at  # an append does not restore times


async def test_replace_mode_makes_the_session_what_the_file_says(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    await commit(store, sid, [msg("1"), msg("2")])
    path = str(tmp_path / "backup.jsonl")
    await export_sessions(store, path, [sid])
    await commit(store, sid, [msg("3")])  # history moved on after the backup
    result = await import_sessions(store, path, mode="replace")
    assert result.replaced == [sid] and result.added == 2
    assert await items_of(store, sid) == [msg("1"), msg("2")]
    again = await import_sessions(store, path, mode="replace")
    assert again.replaced == [sid]
    assert await items_of(store, sid) == [msg("1"), msg("2")]


async def test_import_refuses_an_unknown_mode_and_bad_times(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    path = tmp_path / "export.jsonl"
    header = {"type": "header", "format": "txsessions-export", "version": 1}
    path.write_text(json.dumps(header) + "\n")
    with pytest.raises(ValueError, match="mode must be one of skip, append, replace; got 'merge'"):
        await import_sessions(store, str(path), mode="merge")  # type: ignore[arg-type]
    for created, updated, complaint in (
        ("2026-01-02T00:00:00", "2026-01-02T00:00:00+00:00", "created_at must be an ISO 8601"),
        ("2026-01-02T00:00:00Z", "yesterday", "updated_at must be an ISO 8601"),
        ("2026-01-03T00:00:00Z", "2026-01-02T00:00:00Z", "is after updated_at"),
    ):
        session = {"type": "session", "session": sid, "created_at": created}
        session["updated_at"] = updated
        end = {"type": "end", "session": sid, "items": 0}
        path.write_text("".join(json.dumps(x) + "\n" for x in (header, session, end)))
        with pytest.raises(ImportFileError, match=complaint) as info:
            await import_sessions(store, str(path))
        assert info.value.line == 2
    assert await store.session_info(sid) is None


async def test_export_and_import_carry_the_catalogue_entry(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    session = store.session(sid)
    session.set_info(
        user_id="alice",
        title="Ünïcode",
        tags={"b", "a"},
        metadata={"k": [1, {"x": None}]},
        ttl=timedelta(hours=3),
    )
    await session.add_items([msg("1")])
    await session.commit()
    await commit(store, f"{sid}-plain", [msg("2")])
    path = str(tmp_path / "catalogue.jsonl")
    await export_sessions(store, path, [sid, f"{sid}-plain"])
    text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines()]
    heads = [line for line in lines if line["type"] == "session"]
    assert heads[0]["user_id"] == "alice" and heads[0]["tags"] == ["a", "b"]
    assert heads[0]["ttl_seconds"] == 3 * 3600.0
    assert "user_id" not in heads[1]  # only the fields that are set
    await store.delete_session(sid)
    await import_sessions(store, path, mode="replace")
    info = await store.session_info(sid)
    assert info is not None
    assert (info.user_id, info.title, info.tags, info.metadata, info.ttl) == (
        "alice",
        "Ünïcode",
        ("a", "b"),
        {"k": [1, {"x": None}]},
        timedelta(hours=3),
    )
    plain = await store.session_info(f"{sid}-plain")
    assert plain is not None and plain.user_id is None and plain.tags == ()


async def test_import_refuses_a_bad_catalogue_entry_naming_its_line(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    path = tmp_path / "bad.jsonl"
    lines = [
        {"type": "header", "format": "txsessions-export", "version": 1},
        {"type": "session", "session": sid, "tags": "not-a-list"},
        {"type": "end", "session": sid, "items": 0},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(ImportFileError, match="line 2: bad catalogue entry: tags must be"):
        await import_sessions(store, str(path))
    assert await store.session_info(sid) is None

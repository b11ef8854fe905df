"""Import and migration write through the core's commit path: retried, shielded, bounded.

Both run on both backends; faults are injected with the pass-through proxy backend
around the real one (the database itself is real).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agents import SQLiteSession as SDKSQLiteSession

from sessions import RetryPolicy, Store
from sessions._tools.migrate import migrate, open_source
from sessions._tools.transfer import import_sessions
from sessions.errors import CommitError, TransientStorageError
from tests.conftest import Target
from tests.contract.proxy import ProxyBackend, install_proxy


def write_export(path: Path, sessions: dict[str, int]) -> None:
    lines = [{"type": "header", "format": "txsessions-export", "version": 1}]
    for sid, n in sessions.items():
        lines.append({"type": "session", "session": sid})
        lines += [{"type": "item", "session": sid, "item": {"n": i}} for i in range(n)]
        lines.append({"type": "end", "session": sid, "items": n})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


async def stored(target: Target, sid: str) -> list[Any]:
    store = await target.open()
    return await store.session(sid).get_items()


async def _losing_every_first_reply(target: Target) -> tuple[Store[Any], ProxyBackend]:
    """A store (3 attempts) and its proxy, which loses the reply of every other write:
    the write IS applied, the caller hears a TransientStorageError."""
    store = await target.open(retry=RetryPolicy(attempts=3, initial_delay=0))
    proxy = install_proxy(store)
    calls = 0

    async def lose_every_first_reply() -> None:
        nonlocal calls
        calls += 1
        if calls % 2:  # the chunk IS written; the reply is lost
            raise TransientStorageError("reply lost", outcome_known=False)

    proxy.after_apply = lose_every_first_reply
    return store, proxy


async def test_import_retries_transient_failures_and_adds_each_item_once(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store, proxy = await _losing_every_first_reply(target)
    path = tmp_path / "export.jsonl"
    write_export(path, {f"{sid}-a": 7, f"{sid}-b": 3})
    result = await import_sessions(store, str(path), chunk_items=3)
    assert (result.added, result.already_present) == (10, 0)
    # 4 chunks (3+3+1, 3) and a marker per session, each applied twice
    assert proxy.apply_calls == 2 * (4 + 2)
    assert await stored(target, f"{sid}-a") == [{"n": i} for i in range(7)]
    assert await stored(target, f"{sid}-b") == [{"n": i} for i in range(3)]


async def test_import_that_gives_up_says_so_and_a_rerun_completes_it(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open(retry=RetryPolicy(attempts=2, initial_delay=0))
    proxy = install_proxy(store)

    async def database_down() -> None:
        raise TransientStorageError("connection refused", outcome_known=True)

    path = tmp_path / "export.jsonl"
    write_export(path, {f"{sid}-a": 5})
    await import_sessions(store, str(path), chunk_items=2)  # first: everything in
    proxy.before_apply = database_down
    write_export(path, {f"{sid}-a": 5, f"{sid}-c": 4})
    try:
        await import_sessions(store, str(path), chunk_items=2)
    except CommitError as exc:
        assert exc.outcome_known is True and exc.attempts == 2
    else:
        raise AssertionError("an import into a database that is down must fail")
    proxy.before_apply = None
    result = await import_sessions(store, str(path), chunk_items=2)
    assert (result.added, result.already_present) == (4, 5)
    assert await stored(target, f"{sid}-c") == [{"n": i} for i in range(4)]


async def test_a_cancelled_import_finishes_its_chunk_in_flight_and_a_rerun_adds_the_rest(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    proxy = install_proxy(store)
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold_the_first_chunk() -> None:
        if proxy.apply_calls == 2:  # call 1 writes the session's marker, call 2 a chunk
            entered.set()
            await release.wait()

    proxy.before_apply = hold_the_first_chunk
    path = tmp_path / "export.jsonl"
    write_export(path, {sid: 6})
    task = asyncio.create_task(import_sessions(store, str(path), chunk_items=2))
    await entered.wait()
    task.cancel()  # while the first chunk is in the database call
    await asyncio.sleep(0)
    release.set()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the import was not cancelled")
    assert await stored(target, sid) == [{"n": 0}, {"n": 1}]  # the chunk in flight: whole
    proxy.before_apply = None
    result = await import_sessions(store, str(path), chunk_items=2)
    assert (result.added, result.already_present) == (4, 2)
    assert await stored(target, sid) == [{"n": i} for i in range(6)]


async def test_migration_retries_transient_failures_and_copies_each_item_once(
    target: Target, tmp_path: Path, sid: str
) -> None:
    sdk_path = tmp_path / "sdk.db"
    sdk = SDKSQLiteSession(sid, sdk_path)
    await sdk.add_items([{"role": "user", "content": f"m{i}"} for i in range(5)])
    sdk.close()
    store, proxy = await _losing_every_first_reply(target)
    source = await open_source(f"sqlite:///{sdk_path}")
    try:
        report = await migrate(source, store, chunk_items=2)
    finally:
        await source.close()
    assert report.ok and report.copied == 5
    assert [item["content"] for item in await stored(target, sid)] == [f"m{i}" for i in range(5)]

"""Exactly-once does not depend on how long batch records are kept (issue 11).

Every commit records its batch id; ``prune_batch_records`` forgets old records. These
tests age the records in the real database (raw SQL), prune, and check that nothing a
retry or a rerun could send is applied twice: an import or a migration run again
later adds nothing, and a prune may never forget a commit that can still be retried.
"""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession as SDKSQLiteSession

from sessions import RetryPolicy, Store
from sessions._tools.migrate import migrate, open_source
from sessions._tools.transfer import import_sessions
from sessions.errors import CommitError
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.helpers import msg


async def age_batch_records(target: Target, session_prefix: str, days: int = 2) -> None:
    """Make every batch record of the sessions starting with ``session_prefix`` old."""
    shift = target.ago("committed_at", days * 86400)
    await target.execute(
        f"UPDATE txs_batches SET committed_at = {shift} WHERE session_id LIKE {target.param(1)}",
        session_prefix + "%",
    )


async def stored(target: Target, session_id: str) -> list[Any]:
    store = await target.open()
    return await store.session(session_id).get_items()


def write_export(path: Path, sessions: dict[str, list[dict[str, Any]]]) -> None:
    lines: list[dict[str, Any]] = [{"type": "header", "format": "txsessions-export", "version": 1}]
    for sid, items in sessions.items():
        lines.append({"type": "session", "session": sid})
        lines += [{"type": "item", "session": sid, "item": item} for item in items]
        lines.append({"type": "end", "session": sid, "items": len(items)})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


async def test_an_import_run_again_after_pruning_adds_nothing(
    target: Target, tmp_path: Path, sid: str
) -> None:
    store = await target.open()
    path = tmp_path / "export.jsonl"
    write_export(path, {sid: [msg("a"), msg("b")]})
    first = await import_sessions(store, str(path))
    assert first.added == 2
    other = store.session(f"{sid}-chat")  # an ordinary commit, whose record may go
    await other.add_items([msg("x")])
    await other.commit()
    await age_batch_records(target, sid)
    assert await store.prune_batch_records(timedelta(days=1)) >= 1  # the chat commit's
    again = await import_sessions(store, str(path))
    assert (again.added, again.already_present) == (0, 2)
    assert await stored(target, sid) == [msg("a"), msg("b")]  # not 4 items


async def test_a_migration_run_again_after_pruning_adds_nothing(
    target: Target, tmp_path: Path, sid: str
) -> None:
    sdk_path = tmp_path / "sdk.db"
    sdk = SDKSQLiteSession(sid, sdk_path)
    await sdk.add_items([msg(f"m{i}") for i in range(3)])
    sdk.close()
    store = await target.open()

    async def run() -> Any:
        source = await open_source(f"sqlite:///{sdk_path}")
        try:
            return await migrate(source, store)
        finally:
            await source.close()

    assert (await run()).copied == 3
    await age_batch_records(target, sid)
    await store.prune_batch_records(timedelta(days=1))
    report = await run()  # failed before: "not written by a migration"
    assert report.ok, [m.describe() for m in report.mismatches]
    assert (report.copied, report.already_present) == (0, 3)
    assert await stored(target, sid) == [msg(f"m{i}") for i in range(3)]


async def test_prune_refuses_an_age_shorter_than_the_longest_retry_window_naming_both(
    target: Target,
) -> None:
    policy = RetryPolicy(attempts=4, initial_delay=1.0, max_delay=2.0)  # waits 1 + 2 + 2 s
    store = await target.open(retry=policy, commit_timeout=45)
    assert store.min_batch_record_age == 5 + 45 + 300
    for too_short in (timedelta(0), timedelta(seconds=349)):
        with pytest.raises(ValueError) as info:
            await store.prune_batch_records(too_short)
        message = str(info.value)
        assert f"older_than={too_short.total_seconds():g}s" in message
        assert "at least 350s" in message
        assert "retry window 5s" in message and "commit_timeout 45s" in message
    assert await store.prune_batch_records(timedelta(seconds=350)) >= 0


async def _unknown_outcome_commit(target: Target, sid: str) -> tuple[Store[Any], Any]:
    """A session whose commit reached the database, but the caller could not know."""
    store: Store[Any] = await target.open(retry=RetryPolicy(attempts=1))
    session = store.session(sid)
    proxy = install_proxy(store)

    async def reply_lost() -> None:
        raise RuntimeError("connection dropped after COMMIT")

    proxy.after_apply = reply_lost  # the batch IS stored; the caller cannot know
    await session.add_items([msg("1"), msg("2")])
    with pytest.raises(CommitError) as info:
        await session.commit()
    assert info.value.outcome_known is False
    proxy.after_apply = None
    return store, session


async def test_a_commit_retried_after_a_prune_is_not_applied_twice(
    target: Target, sid: str
) -> None:
    store, session = await _unknown_outcome_commit(target, sid)
    with contextlib.suppress(ValueError):  # refused now (the test above); accepted before
        await store.prune_batch_records(timedelta(0))
    await session.commit()  # the same batch again: its record must still be there
    assert await stored(target, sid) == [msg("1"), msg("2")]


async def test_pruning_at_the_shortest_allowed_age_keeps_a_commit_that_may_be_retried(
    target: Target, sid: str
) -> None:
    store, session = await _unknown_outcome_commit(target, sid)
    await store.prune_batch_records(timedelta(seconds=store.min_batch_record_age))
    await session.commit()
    assert await stored(target, sid) == [msg("1"), msg("2")]

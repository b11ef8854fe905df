"""``sessions list --user/--tag``, the catalogue in ``list``/``show``/``--json``,
``sessions delete-user`` and ``sessions purge`` by TTL, on both backends (child processes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from sessions import open_store
from tests.conftest import Target

from .test_cli import cli, one_error_line

EVIL = "ev[bold]il\x1b[2J\u202e"


@pytest.fixture
def catalogue_db(target: Target, tmp_path: Path) -> Target:
    """The empty store the catalogue is written to."""
    return target.fresh(tmp_path)


@pytest.fixture
async def catalogued(catalogue_db: Target) -> AsyncIterator[str]:
    url = catalogue_db.url
    store = await open_store(url)
    try:
        for session_id, user, tags, title in (
            ("c-1", "alice", {"support"}, "Refund"),
            ("c-2", "alice", {"sales", "vip"}, EVIL),
            ("c-3", "bob", {"support"}, None),
            ("c-4", None, set(), None),
        ):
            session = store.session(session_id)
            session.set_info(user_id=user, tags=tags, title=title, metadata={"n": session_id})
            await session.add_items([{"role": "user", "content": session_id}])
            await session.commit()
        short = store.session("c-4")
        short.set_info(ttl=timedelta(days=2))
        await short.commit()
    finally:
        await store.close()
    yield url


def _ids(out: str) -> list[str]:
    return [r["session_id"] for r in json.loads(out)]


async def test_list_filters_by_user_and_tag_and_shows_the_catalogue(catalogued: str) -> None:
    by_user, by_tag, both, table, paged = await asyncio.gather(
        cli("list", "--user", "alice", "--json", "--db", catalogued),
        cli("list", "--tag", "support", "--json", "--db", catalogued),
        cli("list", "--user", "alice", "--tag", "vip", "--json", "--db", catalogued),
        cli("list", "--db", catalogued, env={"COLUMNS": "200"}),
        cli("list", "--user", "alice", "--limit", "1", "--db", catalogued),
    )
    assert _ids(by_user.out) == ["c-1", "c-2"], by_user.err
    assert _ids(by_tag.out) == ["c-1", "c-3"]
    (record,) = json.loads(both.out)
    assert record["user_id"] == "alice" and record["tags"] == ["sales", "vip"]
    assert record["title"] == EVIL and record["metadata"] == {"n": "c-2"}
    assert record["version"] == 1 and record["expires_at"] is None
    assert table.code == 0, table.err
    assert "\x1b" not in table.out and "\u202e" not in table.out  # shown literally
    assert "ev[bold]il\\x1b[2J\\u202e" in table.out
    line = next(li for li in table.out.splitlines() if li.startswith("c-3"))
    assert "bob" in line and "support" in line and "never" in line
    line4 = next(li for li in table.out.splitlines() if li.startswith("c-4"))
    assert "never" not in line4  # its own TTL gives it an expiry
    assert "next page: sessions list --user alice --after c-1" in paged.out


async def test_list_shows_the_store_default_ttl_from_the_url(catalogued: str) -> None:
    result = await cli("list", "--json", "--db", _with_ttl(catalogued, 3600))
    rows = {r["session_id"]: r for r in json.loads(result.out)}
    assert rows["c-1"]["expires_at"] is not None and rows["c-1"]["ttl_seconds"] is None
    assert rows["c-4"]["ttl_seconds"] == 2 * 86400.0


def _with_ttl(url: str, seconds: int) -> str:
    return f"{url}{'&' if '?' in url else '?'}ttl={seconds}"


async def test_show_prints_the_catalogue_entry_literally(catalogued: str) -> None:
    shown = await cli("show", "c-2", "--db", catalogued)
    assert shown.code == 0, shown.err
    assert "  user: alice" in shown.out
    assert "  tags: sales, vip" in shown.out
    assert "  title: ev[bold]il\\x1b[2J\\u202e" in shown.out
    assert '  metadata: {"n": "c-2"}' in shown.out


async def test_delete_user_asks_first_and_erases_only_that_user(catalogued: str) -> None:
    declined = await cli("delete-user", "alice", "--db", catalogued, stdin="n\n")
    assert declined.code != 0 and "aborted" in declined.err
    assert _ids((await cli("list", "--user", "alice", "--json", "--db", catalogued)).out) == [
        "c-1",
        "c-2",
    ]
    done = await cli("delete-user", "alice", "--yes", "--db", catalogued)
    assert done.code == 0, done.err
    assert "deleted 2 sessions of user 'alice'" in done.out
    remaining = await cli("list", "--json", "--db", catalogued)
    assert _ids(remaining.out) == ["c-3", "c-4"]
    one_error_line(await cli("delete-user", "alice", "--yes", "--db", catalogued), "no sessions")
    one_error_line(await cli("delete-user", "", "--yes", "--db", catalogued), "user_id")


async def test_purge_without_older_than_deletes_expired_sessions(
    catalogued: str, catalogue_db: Target
) -> None:
    moved = catalogue_db.ago("updated_at", 3 * 86400)
    await catalogue_db.execute(f"UPDATE {catalogue_db.table('sessions')} SET updated_at = {moved}")
    url = _with_ttl(catalogued, 4 * 86400)  # c-4's own TTL (2 days) has elapsed
    dry = await cli("purge", "--dry-run", "--db", url)
    assert dry.code == 0, dry.err
    assert "would delete 1 session (1 item) expired" in dry.out and "c-4" in dry.out
    done = await cli("purge", "--yes", "--db", url)
    assert "deleted 1 session" in done.out
    assert _ids((await cli("list", "--json", "--db", catalogued)).out) == ["c-1", "c-2", "c-3"]
    nothing = await cli("purge", "--yes", "--db", catalogued)
    assert "nothing to purge: no session has expired" in nothing.out


async def test_list_refuses_an_empty_tag_in_one_line(catalogued: str) -> None:
    one_error_line(await cli("list", "--tag", "", "--db", catalogued), "tag must not be empty")

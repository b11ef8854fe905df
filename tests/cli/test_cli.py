"""The ``sessions`` command, run as a real child process against both backends."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import unicodedata
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sessions import open_store
from tests.conftest import PG_DSN, Target, require_postgres
from tests.helpers import histories

SECRET = "Hunter2-pw_x"


CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "type": "function_call",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "call_id": "call_1",
        "id": "fc_1",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "22C sunny " + "x" * 700},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "It is [bold]22C[/bold] in Paris."}],
    },
]


@dataclass
class Result:
    code: int
    out: str
    err: str


async def cli(*args: str, env: Mapping[str, str] | None = None, stdin: str = "") -> Result:
    """``python -m sessions ARGS`` in a child process (without SESSIONS_DATABASE_URL
    unless ``env`` sets it)."""
    environment = {k: v for k, v in os.environ.items() if k != "SESSIONS_DATABASE_URL"}
    environment["COLUMNS"] = "100"
    environment.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sessions",
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 90)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def one_error_line(result: Result, *words: str) -> str:
    """The failure is exactly one line on stderr, without a traceback, naming ``words``."""
    assert result.code != 0, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    assert lines[0].startswith("error: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def fresh_url(target: Target, tmp_path: Path) -> str:
    """A URL of an empty store of the target's kind (a new file, or a new table prefix
    in the test run's schema so that tests sharing the schema never see each other)."""
    return target.fresh(tmp_path).url


@pytest.fixture
def db(target: Target, tmp_path: Path) -> str:
    return fresh_url(target, tmp_path)


async def seed(url: str, sessions: Mapping[str, list[dict[str, Any]]]) -> None:
    """Store ``sessions`` verbatim (``integrity="off"``: the commands must show whatever
    a store holds, valid history for the API or not)."""
    async with await open_store(url, integrity="off") as store:
        for session_id, items in sessions.items():
            session = store.session(session_id)
            await session.add_items(items)
            await session.commit()


async def history(url: str) -> dict[str, list[Any]]:
    """Every session's items, read back through the ordinary session API."""
    store = await open_store(url)
    try:
        return await histories(store)
    finally:
        await store.close()


@pytest.fixture
async def sample(db: str) -> AsyncIterator[str]:
    await seed(
        db,
        {
            "chat-a": CONVERSATION,
            "chat-b": [{"role": "user", "content": f"hello {i}"} for i in range(3)],
            "chat-c": [{"role": "user", "content": "ünïcödé ✓ \u2028 line"}],
        },
    )
    yield db


# --------------------------------------------------------------------------- reading


async def test_list_pages_and_json(sample: str) -> None:
    table, page, everything, after = await asyncio.gather(
        cli("list", "--db", sample),
        cli("list", "--db", sample, "--limit", "2"),
        cli("list", "--db", sample, "--limit", "2", "--all", "--json"),
        cli("list", "--after", "chat-a", "--json", env={"SESSIONS_DATABASE_URL": sample}),
    )
    assert table.code == 0, table.err
    for session_id, count in (("chat-a", 4), ("chat-b", 3), ("chat-c", 1)):
        line = next(li for li in table.out.splitlines() if li.startswith(session_id))
        assert line.split()[1] == str(count)
    assert "3 sessions" in table.out

    assert page.code == 0
    assert "chat-c" not in page.out and "next page: sessions list --after chat-b" in page.out

    assert everything.code == 0, everything.err
    rows = json.loads(everything.out)
    assert [(r["session_id"], r["items"]) for r in rows] == [
        ("chat-a", 4),
        ("chat-b", 3),
        ("chat-c", 1),
    ]
    # The database can come from SESSIONS_DATABASE_URL instead of --db.
    assert [r["session_id"] for r in json.loads(after.out)] == ["chat-b", "chat-c"]


async def test_show_renders_roles_tool_calls_and_truncates(sample: str) -> None:
    shown, full, raw, unicode = await asyncio.gather(
        cli("show", "chat-a", "--db", sample),
        cli("show", "chat-a", "--db", sample, "--full"),
        cli("show", "chat-a", "--db", sample, "--json"),
        cli("show", "chat-c", "--db", sample, "--json"),
    )
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0].startswith("chat-a · 4 items")
    assert "user" in lines[1] and "What's the weather in Paris?" in lines[1]
    assert "tool call" in lines[2] and 'get_weather({"city":"Paris"})' in lines[2]
    assert "tool output" in lines[3] and "get_weather → 22C sunny" in lines[3]
    assert "… (+" in shown.out  # the 700-character output is cut
    assert "x" * 400 not in shown.out.replace("\n", "").replace(" ", "")
    assert "assistant" in shown.out and "[bold]22C[/bold]" in shown.out  # no markup

    assert "… (+" not in full.out
    assert "x" * 700 in full.out.replace("\n", "").replace(" ", "")

    assert raw.code == 0 and json.loads(raw.out) == CONVERSATION
    assert json.loads(unicode.out) == [{"role": "user", "content": "ünïcödé ✓ \u2028 line"}]


async def test_stats(sample: str, target: Target) -> None:
    result, text = await asyncio.gather(
        cli("stats", "--db", sample, "--json"), cli("stats", "--db", sample)
    )
    assert result.code == 0, result.err
    stats = json.loads(result.out)
    assert stats["backend"] == target.kind
    assert (stats["sessions"], stats["items"]) == (3, 8)
    assert stats["largest_session"] == {"session_id": "chat-a", "items": 4}
    assert stats["idle_30_days"] == 0
    assert text.code == 0 and "sessions:" in text.out and "items:" in text.out


# --------------------------------------------------------------------------- export / import


async def test_export_import_round_trip_is_exact_and_idempotent(
    target: Target, tmp_path: Path, db: str
) -> None:
    big = [{"role": "user", "content": f"message {i}", "n": i} for i in range(1234)]
    sessions = {
        "big": big,  # several read_range pages and several import chunks
        "chat": CONVERSATION,
        'odd "id" ü/✓': [{"nested": {"a": [1, 2.5, None, True]}, "text": "\u0000 nul"}],
    }
    await seed(db, {**sessions, "cleared": [{"role": "user", "content": "gone"}]})
    store = await open_store(db)
    try:
        cleared = store.session("cleared")
        await cleared.clear_session()  # a session that exists, with no items
        await cleared.commit()
    finally:
        await store.close()
    before = await history(db)
    assert before == {**sessions, "cleared": []}

    out = tmp_path / "all.jsonl"
    exported = await cli("export", "-o", str(out), "--db", db)
    assert exported.code == 0, exported.err
    assert "exported 4 sessions (1239 items)" in exported.out
    leftovers = await asyncio.to_thread(
        lambda: [p for p in tmp_path.iterdir() if ".part" in p.name]
    )
    assert leftovers == []  # the export was written to a temporary file, then renamed

    other = fresh_url(target, tmp_path)
    first = await cli("import", str(out), "--db", other)
    assert first.code == 0, first.err
    assert "imported 1239 items into 4 sessions (0 already present)" in first.out
    assert await history(other) == before  # every session, every item, in order

    again = await cli("import", str(out), "--db", other)
    assert again.code == 0, again.err
    assert "imported 0 items into 4 sessions (1239 already present)" in again.out
    assert await history(other) == before

    # Selected sessions only; unknown ids fail before anything is written.
    some = tmp_path / "some.jsonl"
    picked = await cli("export", "chat", "big", "-o", str(some), "--db", db)
    assert picked.code == 0, picked.err
    ids = {json.loads(line).get("session") for line in some.read_text().splitlines()}
    assert ids == {None, "chat", "big"}
    missing = await cli("export", "chat", "nope", "-o", str(tmp_path / "x.jsonl"), "--db", db)
    one_error_line(missing, "unknown session", "'nope'")
    assert not (tmp_path / "x.jsonl").exists()


async def test_import_refuses_a_corrupt_file_naming_the_line(
    target: Target, tmp_path: Path, sample: str
) -> None:
    good = tmp_path / "good.jsonl"
    assert (await cli("export", "-o", str(good), "--db", sample)).code == 0
    lines = [line + "\n" for line in good.read_text(encoding="utf-8").split("\n") if line]

    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text(
        "".join(lines[:4] + ['{"type": "item", "session": "chat-a", \n'] + lines[4:])
    )
    dest = fresh_url(target, tmp_path)
    result = await cli("import", str(corrupt), "--db", dest)
    one_error_line(result, "corrupt.jsonl, line 5", "not valid JSON")
    assert result.code == 1
    assert await history(dest) == {}  # validated before anything was written

    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text("".join(lines[:4]))
    one_error_line(await cli("import", str(truncated), "--db", dest), "truncated")

    not_object = tmp_path / "list.jsonl"
    not_object.write_text('{"type":"item","session":"s","item":[1,2]}\n')
    one_error_line(await cli("import", str(not_object), "--db", dest), "line 1", "bad item")
    assert await history(dest) == {}


async def test_import_into_the_store_it_came_from_skips_says_so_and_modes_change_that(
    tmp_path: Path, sample: str
) -> None:
    out = tmp_path / "backup.jsonl"
    assert (await cli("export", "-o", str(out), "--db", sample)).code == 0
    before = await history(sample)
    back = await cli("import", str(out), "--db", sample)
    assert back.code == 0, back.err
    assert "imported 0 items into 3 sessions (0 already present)" in back.out
    assert (
        "skipped 3 sessions already in the store (8 items not imported): 'chat-a', 'chat-b', "
        "'chat-c'; --mode append adds to them, --mode replace overwrites them" in back.out
    )
    assert await history(sample) == before  # nothing duplicated
    replaced = await cli("import", str(out), "--mode", "replace", "--db", sample)
    assert replaced.code == 0, replaced.err
    assert "imported 8 items into 3 sessions (0 already present); replaced 3 sessions" in (
        replaced.out
    )
    assert await history(sample) == before
    bad = await cli("import", str(out), "--mode", "merge", "--db", sample)
    one_error_line(bad, "--mode must be one of skip, append, replace, got 'merge'")
    assert bad.code == 2


# --------------------------------------------------------------------------- delete / purge


async def test_delete_asks_first(sample: str) -> None:
    no_answer = await cli("delete", "chat-b", "--db", sample)  # stdin at end of input
    assert no_answer.code == 1 and "aborted: nothing deleted" in no_answer.err
    assert "chat-b" in await history(sample)

    accepted = await cli("delete", "chat-b", "--db", sample, stdin="y\n")
    assert accepted.code == 0, accepted.err
    assert "deleted session 'chat-b' (3 items)" in accepted.out
    assert "chat-b" not in await history(sample)

    forced = await cli("delete", "chat-c", "--yes", "--db", sample)
    assert forced.code == 0 and "chat-c" not in await history(sample)

    one_error_line(await cli("delete", "chat-b", "--yes", "--db", sample), "unknown session")


async def white_box(url: str, postgres_sql: str, sqlite_sql: str, *args: Any) -> None:
    """Run one statement on the store's own tables, bypassing the core (``{table}``
    names a table of the store, e.g. ``{sessions}``)."""
    store = await open_store(url)
    backend: Any = store.backend
    try:
        if hasattr(backend, "pool"):
            names = {t: backend.table(t) for t in ("sessions", "items")}
            async with backend.pool.acquire() as conn:
                await conn.execute(postgres_sql.format(**names), *args)
            return
    finally:
        await store.close()
    conn = sqlite3.connect(backend.path)
    try:
        with conn:
            named = {f"p{n}": arg for n, arg in enumerate(args, start=1)}
            conn.execute(sqlite_sql.format(sessions="txs_sessions", items="txs_items"), named)
    finally:
        conn.close()


async def _age(url: str, session_id: str, days: int) -> None:
    """Pretend ``session_id`` was last updated ``days`` ago (the metadata row)."""
    await white_box(
        url,
        "UPDATE {sessions} SET updated_at = updated_at - make_interval(days => $2) "
        "WHERE session_id = $1",
        "UPDATE {sessions} SET updated_at = updated_at - :p2 * 86400 WHERE session_id = :p1",
        session_id,
        days,
    )


async def test_purge_dry_run_confirmation_and_yes(sample: str) -> None:
    await _age(sample, "chat-a", 40)
    await _age(sample, "chat-b", 31)

    dry = await cli("purge", "--older-than", "30d", "--dry-run", "--db", sample)
    assert dry.code == 0, dry.err
    assert "would delete 2 sessions (7 items)" in dry.out
    assert "chat-a" in dry.out and "chat-b" in dry.out and "chat-c" not in dry.out
    assert set(await history(sample)) == {"chat-a", "chat-b", "chat-c"}

    declined = await cli("purge", "--older-than", "30d", "--db", sample, stdin="no\n")
    assert declined.code == 1 and "aborted" in declined.err
    assert set(await history(sample)) == {"chat-a", "chat-b", "chat-c"}

    done = await cli("purge", "--older-than", "5w", "--yes", "--db", sample)
    assert done.code == 0, done.err
    assert "deleted 1 session (4 items)" in done.out
    assert set(await history(sample)) == {"chat-b", "chat-c"}

    nothing = await cli("purge", "--older-than", "1d12h", "--yes", "--db", sample)
    assert "deleted 1 session (3 items)" in nothing.out
    empty = await cli("purge", "--older-than", "1d", "--yes", "--db", sample)
    assert empty.code == 0 and "nothing to purge" in empty.out


# --------------------------------------------------------------------------- errors


COMMANDS = [
    "list",
    "show",
    "stats",
    "turns",
    "fork",
    "rewind",
    "usage",
    "export",
    "import",
    "delete",
    "delete-user",
    "purge",
    "migrate",
    "demo",
]


async def test_every_command_has_help_with_an_example() -> None:
    results = await asyncio.gather(*(cli(command, "--help") for command in COMMANDS))
    for command, result in zip(COMMANDS, results, strict=True):
        assert result.code == 0, result.err
        assert "Example:" in result.out and f"sessions {command}" in result.out


async def test_usage_errors_are_one_line() -> None:
    results = await asyncio.gather(
        cli(),
        cli("list"),
        cli("list", "--bogus", "--db", "sqlite://"),
        cli("frobnicate"),
        cli("export", "--db", "sqlite://"),
        cli("purge", "--older-than", "", "--db", "sqlite://"),
        cli("migrate", "--to", "sqlite://"),
        cli("purge", "--older-than", "30x", "--db", "sqlite://"),
    )
    top, no_db, bad_option, unknown, no_output, no_age, no_source, bad_age = results
    assert top.code == 0 and "Commands:" in top.out
    one_error_line(no_db, "--db", "SESSIONS_DATABASE_URL")
    one_error_line(bad_option, "--bogus")
    one_error_line(unknown, "frobnicate")
    one_error_line(no_output, "--output")
    one_error_line(no_age, "--older-than")
    one_error_line(no_source, "--from")
    one_error_line(bad_age, "30x", "30d")
    for result in results[1:]:
        assert result.code == 2


async def test_operational_errors_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await seed(f"sqlite:///{path}", {"a": [{"x": 1}]})
    missing = tmp_path / "missing.db"
    bare, scheme, absent, no_dir, unknown, no_file, no_out = await asyncio.gather(
        cli("list", "--db", "chat.db"),
        cli("list", "--db", "mysql://u:pw@h/db"),
        cli("list", "--db", f"sqlite:///{missing}"),
        cli("list", "--db", f"sqlite:///{tmp_path}/no/dir/x.db"),
        cli("show", "nope", "--db", f"sqlite:///{path}"),
        cli("import", str(tmp_path / "nope.jsonl"), "--db", f"sqlite:///{path}"),
        cli("export", "-o", str(tmp_path / "no" / "x.jsonl"), "--db", f"sqlite:///{path}"),
    )
    one_error_line(bare, "no scheme", "sqlite:///chat.db")
    assert bare.code == 2
    one_error_line(scheme, "unknown scheme 'mysql'")
    assert scheme.code == 2
    one_error_line(absent, "does not exist")
    assert absent.code == 1 and not missing.exists()  # reading never creates a database
    one_error_line(no_dir, "does not exist")
    one_error_line(unknown, "unknown session 'nope'")
    assert unknown.code == 1
    one_error_line(no_file, "no such file")
    assert no_file.code == 1
    one_error_line(no_out, "cannot write", "does not exist")
    assert no_out.code == 1


async def test_unreachable_postgres_is_one_line_without_password() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/postgres"
    results = await asyncio.gather(
        cli("delete", "x", "--db", url),
        cli("list", env={"SESSIONS_DATABASE_URL": url}),
    )
    for result in results:
        line = one_error_line(result, "postgresql://postgres:***@127.0.0.1:1")
        assert result.code == 1
        assert SECRET not in result.err + result.out, line


async def test_password_never_printed_on_success(pg_schema: str) -> None:
    require_postgres()
    # Trust authentication ignores the password, so the command succeeds with it.
    user, rest = PG_DSN.split("://", 1)[1].split("@", 1)
    url = f"postgresql://{user.split(':')[0]}:{SECRET}@{rest}?schema={pg_schema}&table_prefix=pw_"
    store = await open_store(url)  # create the tables: read-only commands create nothing
    await store.close()
    result = await cli("stats", "--db", url)
    assert result.code == 0, result.err
    assert SECRET not in result.out + result.err
    assert ":***@" in result.out


async def test_missing_cli_extra_prints_the_install_hint() -> None:
    code = (
        "import sys; sys.modules['typer'] = None; "
        "from sessions.cli import main; sys.exit(main(['list']))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert "pip install 'txsessions[cli]'" in err.decode()
    assert len(err.decode().strip().splitlines()) == 1


async def test_reading_a_postgres_schema_without_tables_creates_nothing() -> None:
    require_postgres()
    import asyncpg

    typo = f"txs_typo_{uuid.uuid4().hex[:8]}"
    result = await cli("list", "--db", f"{PG_DSN}?schema={typo}")
    one_error_line(result, "no txsessions tables")
    assert result.code == 1
    conn = await asyncpg.connect(PG_DSN)
    try:
        assert await conn.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", typo) is None
    finally:
        await conn.close()


# --------------------------------------------------------------------------- issue 13


async def test_db_before_the_command_name_as_in_the_readme(
    target: Target, tmp_path: Path, sample: str
) -> None:
    backup = tmp_path / "backup.jsonl"
    exported = await cli("--db", sample, "export", "-o", str(backup))
    assert exported.code == 0, exported.err
    other = fresh_url(target, tmp_path)
    # The README's example: sessions --db postgresql://app@db/app import backup.jsonl
    imported = await cli("--db", other, "import", str(backup))
    assert imported.code == 0, imported.err
    assert "imported 8 items into 3 sessions (0 already present)" in imported.out
    assert await history(other) == await history(sample)
    listed = await cli("--db", other, "list", "--json")
    assert [r["session_id"] for r in json.loads(listed.out)] == ["chat-a", "chat-b", "chat-c"]
    # Before and after, the same URL: fine; different URLs: neither is silently ignored.
    same = await cli("--db", other, "stats", "--db", other)
    assert same.code == 0, same.err
    both = await cli("--db", other, "stats", "--db", sample)
    one_error_line(both, "--db", "disagree")
    assert both.code == 2
    # --db before the command wins over the environment, as --db after it does.
    env = {"SESSIONS_DATABASE_URL": "sqlite:///nowhere.db"}
    assert (await cli("--db", other, "stats", env=env)).code == 0


MARKUP_IDS = ["evil[/bold]", "[bold red]loud[/]", ":smile: [link=http://x]y[/link]"]


async def test_markup_in_session_ids_and_items_is_printed_literally(db: str) -> None:
    item = {"role": "user", "content": "[/] [red]not red[/red] :thumbs_up:"}
    await seed(db, {sid: [item] * (2 if sid == "evil[/bold]" else 1) for sid in MARKUP_IDS})
    await asyncio.gather(*(_age(db, sid, 40) for sid in MARKUP_IDS))
    listed, dry, stats, *shown = await asyncio.gather(
        cli("list", "--db", db, env={"COLUMNS": "200"}),
        cli("purge", "--older-than", "30d", "--dry-run", "--db", db, env={"COLUMNS": "200"}),
        cli("stats", "--db", db),
        *(cli("show", "--db", db, "--", sid) for sid in MARKUP_IDS),
    )
    for result in (listed, dry, stats, *shown):
        assert result.code == 0, result.err
        assert "MarkupError" not in result.err
    for sid in MARKUP_IDS:
        assert sid in listed.out and sid in dry.out
    for sid, result in zip(MARKUP_IDS, shown, strict=True):
        assert result.out.startswith(sid + " · ")
        assert "[/] [red]not red[/red] :thumbs_up:" in result.out
    assert "largest session:    evil[/bold] (2 items)" in stats.out


ESCAPES = "\x1b[2J\x1b]0;pwned\x07\r\x08\x9b31m\u202eevil\u2028"
VISIBLE = "\\x1b[2J\\x1b]0;pwned\\x07\\r\\x08\\x9b31m\\u202eevil\\u2028"


def raw_controls(text: str) -> list[str]:
    """Characters of ``text`` that would drive a terminal (all but line breaks)."""
    return sorted(
        {c for c in text if unicodedata.category(c) == "Cc" and c != "\n"}
        | ({c for c in text if c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028"})
    )


async def test_terminal_escapes_in_user_text_are_shown_visibly(
    target: Target, tmp_path: Path, db: str
) -> None:
    sid = f"id{ESCAPES}"
    items = [
        {"role": "user", "content": f"text{ESCAPES}"},
        {"type": "function_call", "name": f"tool{ESCAPES}", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": f"out{ESCAPES}"},
    ]
    await seed(db, {sid: items})
    out = tmp_path / "x.jsonl"
    results = await asyncio.gather(
        cli("list", "--db", db, env={"COLUMNS": "300"}),
        cli("list", "--json", "--db", db),
        cli("stats", "--db", db),
        cli("stats", "--json", "--db", db),
        cli("show", "--db", db, "--", sid),
        cli("show", "--json", "--db", db, "--", sid),
        cli("purge", "--older-than", "0s", "--dry-run", "--db", db, env={"COLUMNS": "300"}),
        cli("export", "-o", "-", "--db", db),
        cli("export", "-o", str(out), "--db", db),
        cli("delete", "--db", db, "--", sid),  # asks first: the question holds the id
        cli("show", "--db", db, "--", f"no{ESCAPES}"),  # an error naming the id
    )
    for result in results:
        assert raw_controls(result.out + result.err) == [], (result.out, result.err)
    listed, listed_json, stats, stats_json, shown, shown_json, dry, exported = results[:8]
    assert f"id{VISIBLE}" in listed.out and f"id{VISIBLE}" in dry.out
    assert f"largest session:    id{VISIBLE} (3 items)" in stats.out
    assert f"text{VISIBLE}" in shown.out and f"tool{VISIBLE}" in shown.out
    assert json.loads(listed_json.out)[0]["session_id"] == sid
    assert json.loads(stats_json.out)["largest_session"]["session_id"] == sid
    assert json.loads(shown_json.out) == items
    lines = [json.loads(line) for line in exported.out.splitlines()]
    assert lines[1]["session"] == sid and lines[2]["item"] == items[0]
    deleted, unknown = results[-2:]
    assert "Delete session 'id\\x1b[2J" in deleted.err
    assert "unknown session 'no\\x1b[2J" in unknown.err


async def _corrupt(url: str, session_id: str, text: str) -> None:
    """Store ``text`` as the newest row of ``session_id``."""
    await white_box(
        url,
        "INSERT INTO {items} (session_id, seq, batch_id, data) VALUES ($1, 1000000, 'c', $2)",
        "INSERT INTO {items} (session_id, seq, batch_id, data) VALUES (:p1, 1000000, 'c', :p2)",
        session_id,
        text,
    )


async def test_show_json_stays_valid_json_with_corrupt_rows(db: str) -> None:
    await seed(db, {"s": [{"role": "user", "content": "fine"}]})
    await _corrupt(db, "s", '{"cut": "in the mid')
    shown = await cli("show", "s", "--json", "--db", db)
    assert shown.code == 0, shown.err
    items = json.loads(shown.out, parse_constant=lambda name: pytest.fail(name))
    assert items[0] == {"role": "user", "content": "fine"}
    assert items[1]["error"] == "corrupt row" and items[1]["raw"] == '{"cut": "in the mid'
    assert isinstance(items[1]["key"], int) and "not valid JSON" in items[1]["reason"]
    text = await cli("show", "s", "--db", db)
    assert "corrupt" in text.out and '{"cut": "in the mid' in text.out


async def test_show_json_reports_nan_and_non_objects_as_corrupt(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nan.db'}"
    await seed(url, {"s": [{"n": 1}]})
    for n, text in enumerate(('{"n": NaN}', "[1, 2]", '"just text"')):
        conn = sqlite3.connect(tmp_path / "nan.db")
        with conn:
            conn.execute(
                "INSERT INTO txs_items (session_id, seq, batch_id, data) VALUES ('s', ?, 'x', ?)",
                (100 + n, text),
            )
        conn.close()
    shown = await cli("show", "s", "--json", "--db", url)
    items = json.loads(shown.out, parse_constant=lambda name: pytest.fail(name))
    assert items[0] == {"n": 1}
    assert [i["raw"] for i in items[1:]] == ['{"n": NaN}', "[1, 2]", '"just text"']
    assert [i["error"] for i in items[1:]] == ["corrupt row"] * 3


async def test_no_cli_option_is_silently_ignored(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await seed(url, {"a": [{"role": "user", "content": "x"}]})
    results = await asyncio.gather(
        cli("show", "a", "--json", "--max-chars", "50", "--db", url),
        cli("show", "a", "--json", "--full", "--db", url),
        cli("show", "a", "--full", "--max-chars", "50", "--db", url),
        cli("purge", "--older-than", "1d", "--dry-run", "--yes", "--db", url),
        cli("--db", url, "migrate", "--from", "sqlite:///agents.db", "--to", "sqlite:///o.db"),
        cli("demo", "--db", "postgresql://u@h/db"),
        cli("--db", "sqlite://", "demo"),
    )
    words = [
        ("--max-chars", "--json"),
        ("--full", "--json"),
        ("--full", "--max-chars"),
        ("--yes", "--dry-run"),
        ("--db", "--to", "disagree"),
        ("demo", "SQLite file"),
        ("demo", "SQLite file"),
    ]
    for result, expected in zip(results, words, strict=True):
        one_error_line(result, *expected)
        assert result.code == 2
    assert (await cli("show", "a", "--max-chars", "10", "--db", url)).code == 0


def test_only_the_render_module_prints() -> None:
    """User-controlled text is made safe in one place: no other CLI module writes output."""
    package = Path(__file__).resolve().parents[2] / "sessions" / "cli"
    writes = ("print(", "sys.stdout", "sys.stderr", "Console(", ".echo(")
    modules = sorted(package.glob("*.py"))
    assert {m.name for m in modules} >= {"render.py", "app.py", "inspect.py", "transfer.py"}
    for module in modules:
        if module.name in ("render.py", "__init__.py"):  # __init__: the install hint only
            continue
        source = module.read_text(encoding="utf-8")
        assert [w for w in writes if w in source] == [], module.name


async def test_export_skips_a_stored_nan_row_as_corrupt_so_the_file_imports(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'nan.db'}"
    await seed(url, {"s": [{"n": 1}]})
    await _corrupt(url, "s", '{"n": NaN}')
    out = tmp_path / "export.jsonl"
    exported = await cli("export", "-o", str(out), "--db", url)
    assert exported.code == 0, exported.err
    assert "NaN" not in out.read_text(encoding="utf-8")
    again = f"sqlite:///{tmp_path / 'again.db'}"
    imported = await cli("import", str(out), "--db", again)
    assert imported.code == 0, imported.err
    store = await open_store(again)
    try:
        assert await store.session("s").get_items() == [{"n": 1}]
    finally:
        await store.close()


# --------------------------------------------------------------------------- turns, fork


async def test_turns_fork_and_rewind_commands_print_literally_and_work_on_whole_turns(
    db: str,
) -> None:
    store = await open_store(db)
    try:
        session = store.session("chat")
        for n, run in enumerate(("run-a", "run-\x1b[31mred")):
            session.set_run_id(run)
            await session.add_items([{"role": "user", "content": f"q{n}"}] * (n + 1))
            await session.commit()
    finally:
        await store.close()
    text = await cli("turns", "chat", "--db", db)
    assert text.code == 0, text.err
    assert "run-a" in text.out and "\x1b" not in text.out and "\\x1b" in text.out
    as_json = await cli("turns", "chat", "--json", "--db", db)
    turns = json.loads(as_json.out)["turns"]
    assert [(t["number"], t["items"], t["run_id"]) for t in turns] == [
        (1, 1, "run-a"),
        (2, 2, "run-\x1b[31mred"),
    ]
    newest = await cli("turns", "chat", "--last", "1", "--json", "--db", db)
    assert [t["number"] for t in json.loads(newest.out)["turns"]] == [2]
    one_error_line(await cli("turns", "chat", "--last", "0", "--db", db), "--last")
    for _ in range(2):  # a rerun adds nothing
        forked = await cli("fork", "chat", "chat-edit", "--at-turn", "1", "--json", "--db", db)
        assert forked.code == 0, forked.err
        assert json.loads(forked.out) == {"session_id": "chat-edit", "source": "chat", "turns": 1}
    assert (await history(db))["chat-edit"] == [{"role": "user", "content": "q0"}]
    listed = await cli("turns", "chat", "--db", db)
    assert "fork chat-edit at turn 1" in listed.out
    one_error_line(await cli("fork", "chat", "x", "--at-turn", "5", "--db", db), "at_turn")
    hidden = await cli("rewind", "chat", "--to-turn", "1", "--db", db)
    assert hidden.code == 0 and "session chat: 1 turn hidden" in hidden.out, hidden.err
    assert (await history(db))["chat"] == [{"role": "user", "content": "q0"}]
    restored = await cli("rewind", "chat", "--undo", "--json", "--db", db)
    assert json.loads(restored.out) == {"session_id": "chat", "restored": 1}
    assert len((await history(db))["chat"]) == 3
    one_error_line(await cli("rewind", "chat", "--db", db), "--to-turn", "--undo")


async def test_rewind_undo_of_an_unknown_id_fails_and_creates_no_session(db: str) -> None:
    await seed(db, {"chat": [{"n": 1}]})
    one_error_line(await cli("rewind", "typo-id", "--undo", "--db", db), "unknown session")
    one_error_line(await cli("rewind", "typo-id", "--to-turn", "0", "--db", db), "typo-id")
    assert list(await history(db)) == ["chat"]
    nothing = await cli("rewind", "chat", "--undo", "--db", db)
    assert nothing.code == 0, nothing.err
    assert nothing.out.strip() == "session chat: no rewound turns to restore, nothing changed"


async def test_rewind_to_the_last_turn_says_nothing_was_hidden_and_changes_nothing(db: str) -> None:
    await seed(db, {"chat": [{"n": 1}]})
    before = await history(db)
    last = await cli("rewind", "chat", "--to-turn", "1", "--db", db)
    assert last.code == 0, last.err
    assert last.out.strip() == "session chat: no turns after turn 1, nothing changed"
    assert await history(db) == before


async def test_rewind_and_fork_at_a_turn_splitting_a_tool_call_from_its_output_fail_in_one_line(
    db: str,
) -> None:
    fcall = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    fout = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    store = await open_store(db)
    try:
        session = store.session("chat")
        for part in ([{"role": "user", "content": "q"}, fcall], [fout]):
            await session.add_items(part)
            await session.commit()
    finally:
        await store.close()
    for args in (("rewind", "chat", "--to-turn", "1"), ("fork", "chat", "x", "--at-turn", "1")):
        failed = await cli(*args, "--db", db)
        one_error_line(failed, "turn 1", "splits a tool call from its output", "'c1'")
    stored = await history(db)
    assert stored["chat"][1:] == [fcall, fout] and "x" not in stored  # nothing applied


async def test_usage_sums_recorded_usage_per_session_and_store_as_text_and_json(db: str) -> None:
    from sessions import TurnUsage

    store = await open_store(db)
    try:
        for session_id, tokens in (("a", 100), ("b", 1000)):
            session = store.session(session_id)
            await session.add_items([{"role": "user", "content": "q"}])
            session.record_usage(TurnUsage(1, tokens, tokens // 10, 0, 0))
            await session.commit()
    finally:
        await store.close()
    one = await cli("usage", "a", "--json", "--db", db)
    assert one.code == 0, one.err
    assert json.loads(one.out)["input_tokens"] == 100
    every = await cli("usage", "--since", "1d", "--json", "--db", db)
    body = json.loads(every.out)
    assert body["requests"] == 2 and body["input_tokens"] == 1100 and body["session_id"] is None
    text = await cli("usage", "--db", db)
    assert "input tokens" in text.out and "1,100" in text.out
    one_error_line(await cli("usage", "--since", "soon", "--db", db), "--since")

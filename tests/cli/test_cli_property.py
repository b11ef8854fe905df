"""Generated session ids and items through EVERY ``sessions`` command, on both backends.

Whatever the ids and items hold (rich markup, emoji codes, terminal escape sequences,
C1 controls, bidirectional overrides, line separators, any Unicode), every command's
output holds no character that could drive a terminal, ``--json`` output is strict
JSON that gives the data back exactly, and nothing crashes. Bounded: a few generated
examples per backend (plus fixed nasty ones), no deadline; the commands run in this
process (``sessions.cli.main``) to keep it fast, while ``tests/cli/test_cli.py`` runs them
as child processes.
"""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import sys
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sessions import open_store
from sessions._engine.commit import write_batches
from sessions._model.backend import Batch
from sessions._model.serde import encode_items
from sessions._tools.doctor import check_rows
from sessions.cli import main
from sessions.cli.app import COMMANDS
from sessions.cli.render import literal
from tests.conftest import BACKENDS, Target, make_target

from .test_cli import seed

NASTY = [
    "evil[/bold]",
    "[bold red]x[/]",
    ":smile:",
    "\x1b[2J\x1b]0;t\x07",
    "\x9b31m\u202e\u2028\r",
    "-starts-with-dash",
    " ",
]

_ids = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=12),
).map(lambda s: s or "x")
_text = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
)
_items = st.lists(
    st.one_of(
        st.builds(lambda t: {"role": "user", "content": t}, _text),
        st.builds(
            lambda t: {"role": "assistant", "content": [{"type": "output_text", "text": t}]},
            _text,
        ),
        st.builds(
            lambda n, a, c: {"type": "function_call", "name": n, "arguments": a, "call_id": c},
            _text,
            _text,
            _text,
        ),
        st.builds(
            lambda c, o: {"type": "function_call_output", "call_id": c, "output": o}, _text, _text
        ),
        st.dictionaries(_text, _text, max_size=3),
    ),
    min_size=1,
    max_size=4,
)
_sessions = st.dictionaries(_ids, _items, min_size=1, max_size=2)

FIXED = {"evil[/bold]\x1b[31m": [{"role": "user", "content": "[/]\x1b[2J\u202e :x: \x85"}]}

_DANGER = set(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)


def raw_controls(text: str) -> list[str]:
    """Characters in ``text`` that could drive a terminal (all but line breaks)."""
    bad = {c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cs")}
    return sorted(bad | (set(text) & _DANGER))


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


@dataclass
class Run:
    code: int
    out: str
    err: str


def run(*args: str, stdin: str = "") -> Run:
    """``sessions ARGS`` in this process; checks the output can drive no terminal."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(list(args))
    finally:
        sys.stdin = saved
    result = Run(code, out.getvalue(), err.getvalue())
    assert raw_controls(result.out + result.err) == [], (args, result)
    assert "Traceback" not in result.err, result.err
    return result


@dataclass
class Stores:
    target: Target
    tmp: Path

    def fresh(self) -> str:
        """The URL of an empty store (a new file, or a new table prefix)."""
        return self.target.fresh(self.tmp).url

    def seeded(self, fill: Callable[..., Awaitable[None]], *args: Any) -> str:
        """The URL of an empty store after ``fill(url, *args)`` has run on it."""
        url = self.fresh()
        asyncio.run(fill(url, *args))
        return url


@pytest.fixture(params=BACKENDS)
def stores(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stores]:
    monkeypatch.setenv("COLUMNS", "400")  # long escaped ids stay on one table line
    monkeypatch.delenv("SESSIONS_DATABASE_URL", raising=False)
    yield Stores(make_target(request.param, tmp_path, request), tmp_path)


async def _sdk_file(path: Path, sessions: dict[str, list[Any]]) -> None:
    for session_id, items in sessions.items():
        sdk = SQLiteSession(session_id, path)
        await sdk.add_items(items)
        sdk.close()


def test_the_property_tests_cover_every_command() -> None:
    covered = {
        "list",
        "show",
        "stats",
        "export",
        "import",
        "delete",
        "purge",
        "migrate",
        "doctor",
        "demo",
    }
    covered |= {"delete-user"}
    covered |= {"turns", "fork", "rewind", "usage"}
    assert set(COMMANDS) == covered


SETTINGS = settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _over_generated_sessions(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` under SETTINGS, given generated ``sessions`` and the FIXED example."""
    return SETTINGS(given(sessions=_sessions)(example(sessions=FIXED)(test)))


@_over_generated_sessions
def test_reading_commands_show_generated_text_literally(
    stores: Stores, sessions: dict[str, list[Any]]
) -> None:
    url = stores.seeded(seed, sessions)
    ids = sorted(sessions)
    listed = run("list", "--db", url)
    for session_id in ids:
        assert literal(session_id) in listed.out
    assert [
        r["session_id"] for r in strict_json(run("list", "--json", "--all", "--db", url).out)
    ] == ids
    after = run("list", "--json", f"--after={ids[0]}", "--db", url)
    assert [r["session_id"] for r in strict_json(after.out)] == ids[1:]
    stats = strict_json(run("stats", "--json", "--db", url).out)
    assert stats["sessions"] == len(ids)
    assert run("stats", "--db", url).code == 0
    for session_id in ids:
        assert (
            strict_json(run("show", "--json", "--db", url, "--", session_id).out)
            == sessions[session_id]
        )
        shown = run("show", "--full", "--db", url, "--", session_id)
        assert shown.code == 0 and shown.out.startswith(literal(session_id) + " · ")
        assert run("show", "--db", url, "--", session_id).code == 0


@_over_generated_sessions
def test_writing_commands_show_generated_text_literally(
    stores: Stores, sessions: dict[str, list[Any]]
) -> None:
    url, other = stores.seeded(seed, sessions), stores.fresh()
    ids = sorted(sessions)
    backup = stores.tmp / f"{uuid.uuid4().hex}.jsonl"
    assert run("export", "-o", str(backup), "--db", url).code == 0
    streamed = run("export", "-o", "-", "--db", url)
    records = [strict_json(line) for line in streamed.out.splitlines()]
    assert [r["item"] for r in records if r["type"] == "item"] == [
        item for session_id in ids for item in sessions[session_id]
    ]
    assert run("export", "-o", str(backup) + ".one", "--db", url, "--", ids[0]).code == 0
    assert run("--db", other, "import", str(backup)).code == 0
    assert [r["session_id"] for r in strict_json(run("list", "--json", "--db", other).out)] == ids
    declined = run("delete", "--db", url, "--", ids[0], stdin="n\n")
    assert declined.code == 1 and literal(repr(ids[0])) in declined.err
    assert run("purge", "--older-than", "0s", "--dry-run", "--db", url).code == 0
    assert run("delete", "--yes", "--db", url, "--", ids[0]).code == 0
    assert run("show", "--db", url, "--", ids[0]).code == 1  # an error line naming the id
    purged = run("purge", "--older-than", "0s", "--yes", "--db", url)
    left = len(ids) - 1
    assert purged.code == 0
    assert (f"deleted {left} session" if left else "nothing to purge") in purged.out


async def _seed_turns(url: str, sessions: dict[str, list[Any]], run_id: str) -> None:
    """Each session: its items as turn 1, then one item as turn 2 with ``run_id`` and usage
    (stored verbatim, ``integrity="off"``, as ``seed`` does)."""
    from sessions import TurnUsage

    await seed(url, sessions)
    async with await open_store(url, integrity="off") as store:
        for session_id in sessions:
            session = store.session(session_id)
            session.set_run_id(run_id)
            await session.add_items([{"role": "user", "content": run_id}])
            session.record_usage(TurnUsage(1, 10, 2, 0, 0))
            await session.commit()


@SETTINGS
@given(sessions=_sessions, run_id=_ids)
@example(sessions=FIXED, run_id="\x1b[31mrun\u202e")
def test_turn_commands_show_generated_text_literally(
    stores: Stores, sessions: dict[str, list[Any]], run_id: str
) -> None:
    url = stores.seeded(_seed_turns, sessions, run_id)
    for session_id in sorted(sessions):
        shown = run("turns", "--db", url, "--", session_id)
        assert shown.code == 0 and literal(run_id) in shown.out
        body = strict_json(run("turns", "--json", "--db", url, "--", session_id).out)
        assert [t["run_id"] for t in body["turns"]] == [None, run_id]
        fork = f"{session_id}·fork"
        forked = run("fork", "--at-turn", "1", "--json", "--db", url, "--", session_id, fork)
        assert strict_json(forked.out) == {"session_id": fork, "source": session_id, "turns": 1}
        listed = run("turns", "--db", url, "--", session_id)
        assert f"fork {literal(fork)} at turn 1" in listed.out
        hidden = run("rewind", "--to-turn", "1", "--db", url, "--", session_id)
        assert hidden.code == 0 and literal(session_id) in hidden.out
        undone = run("rewind", "--undo", "--json", "--db", url, "--", session_id)
        assert strict_json(undone.out) == {"session_id": session_id, "restored": 1}
        usage = strict_json(run("usage", "--json", "--db", url, "--", session_id).out)
        assert (usage["session_id"], usage["requests"]) == (session_id, 1)
    assert strict_json(run("usage", "--json", "--db", url).out)["requests"] == len(sessions)


@_over_generated_sessions
def test_migrate_shows_generated_text_literally(
    stores: Stores, sessions: dict[str, list[Any]]
) -> None:
    source = stores.tmp / f"{uuid.uuid4().hex}-agents.db"
    asyncio.run(_sdk_file(source, sessions))
    target = stores.fresh()
    ids = sorted(sessions)
    # One target session already exists and was not written by a migration: it is
    # left alone and reported, by id.
    asyncio.run(seed(target, {ids[0]: [{"role": "user", "content": "mine"}]}))
    migrated = run("migrate", "--from", f"sqlite:///{source}", "--to", target)
    assert migrated.code == 1, migrated
    assert literal(repr(ids[0])) in migrated.out
    assert [r["session_id"] for r in strict_json(run("list", "--json", "--db", target).out)] == ids


async def _raw(url: str, sessions: dict[str, list[Any]]) -> None:
    """The items stored as they are, through the bulk write path (not judged at commit:
    the point is history that breaks the rules)."""
    async with await open_store(url) as store:
        for n, (session_id, items) in enumerate(sessions.items()):
            batch = Batch(f"raw-{n}", False, (), tuple(encode_items(items)))
            await write_batches(store, session_id, [batch])


async def _seed_users(url: str, users: list[str]) -> None:
    async with await open_store(url) as store:
        for n, user in enumerate(users):
            session = store.session(f"s{n}")
            session.set_info(user_id=user, title=user, tags={user[:64]})
            await session.commit()


@_over_generated_sessions
def test_doctor_shows_generated_text_literally(
    stores: Stores, sessions: dict[str, list[Any]]
) -> None:
    url = stores.seeded(_raw, sessions)
    expected = {
        session_id: check_rows(session_id, list(enumerate(encode_items(items), 1))).problems
        for session_id, items in sessions.items()
    }
    found = sum(len(problems) for problems in expected.values())
    text = run("doctor", "--db", url)
    assert text.code == (1 if found else 0), text
    for session_id, problems in expected.items():
        for problem in problems:
            assert f"row {problem.key}: {problem.kind}" in text.out
            if problem.call_id:
                assert literal(problem.call_id) in text.out
        if problems:
            assert f"session {literal(session_id)}:" in text.out
    report = strict_json(run("doctor", "--json", "--db", url).out)
    assert report["problems_found"] == found
    assert {e["session_id"] for e in report["sessions"]} == {s for s, p in expected.items() if p}
    repaired = run("doctor", "--repair", "--db", url)
    assert repaired.code == 0, repaired
    after = strict_json(run("doctor", "--json", "--db", url).out)
    assert after["clean"] is True and after["quarantined_rows"] == report["problems_found"]


@SETTINGS
@given(users=st.lists(_ids, min_size=1, max_size=2, unique=True))
@example(users=["evil[/bold]\x1b[31m", "\u202e:x:"])
def test_catalogue_commands_show_generated_user_text_literally(
    stores: Stores, users: list[str]
) -> None:
    url = stores.seeded(_seed_users, users)
    listed = strict_json(run("list", "--json", "--db", url, "--user", users[0]).out)
    assert [(r["user_id"], r["title"], r["tags"]) for r in listed] == [
        (users[0], users[0], [users[0][:64]])
    ]
    assert run("list", "--db", url, "--tag", users[0][:64]).code == 0
    assert run("show", "--db", url, "--", "s0").code == 0
    declined = run("delete-user", "--db", url, "--", users[0], stdin="n\n")
    assert declined.code == 1 and literal(repr(users[0])) in declined.err
    done = run("delete-user", "--yes", "--db", url, "--", users[0])
    assert done.code == 0 and literal(repr(users[0])) in done.out
    left = strict_json(run("list", "--json", "--db", url).out)
    assert [r["user_id"] for r in left] == users[1:]


def test_corrupt_rows_through_the_reading_commands(tmp_path: Path) -> None:
    """(On SQLite; tests/cli/test_cli.py writes corrupt rows on both backends.)"""
    path = tmp_path / "corrupt.db"
    url = f"sqlite:///{path}"
    asyncio.run(seed(url, {"s\x1b": [{"role": "user", "content": "ok"}]}))
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO txs_items (session_id, seq, batch_id, data) "
            "VALUES ('s\x1b', 99, 'x', '{\"a\": \"\x1b[2J\x9b')"
        )
    conn.close()
    shown = strict_json(run("show", "--json", "--db", url, "--", "s\x1b").out)
    assert shown[1]["error"] == "corrupt row" and shown[1]["raw"] == '{"a": "\x1b[2J\x9b'
    assert "corrupt" in run("show", "--db", url, "--", "s\x1b").out
    exported = run("export", "-o", "-", "--db", url)
    assert "skipped 1 corrupt stored rows" in exported.err


_names = st.text(
    st.characters(exclude_characters="/\x00", exclude_categories=("Cs",)), min_size=1, max_size=12
).filter(lambda s: s not in (".", ".."))


@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=_names)
@example(name="de\x1bmo[b]:x:\u202e.db")
def test_demo_shows_its_database_path_literally(tmp_path: Path, name: str) -> None:
    result = run("demo", "--db", str(tmp_path / name))
    assert result.code == 0, result
    assert literal(str(tmp_path / name)) in result.out
    assert "history whole" in result.out

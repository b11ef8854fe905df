"""SIGKILL during compaction leaves the old history or the new one, never empty or mixed.

Real child processes (``tests/compaction_child.py``) run turns through the SDK's real
``OpenAIResponsesCompactionSession`` (a fake client, no network) over our SQLite and
PostgreSQL sessions (autocommit and buffered) and over ``TransactionalSession`` wrapping
the SDK's own ``SQLiteSession``. Each child is killed with SIGKILL:

* at fixed points: inside the compaction API call (after the snapshot); and, on our
  backends, inside the database transaction that replaces the history, right after it
  deleted its first old row, and as it inserts the compaction output. The history
  must then be exactly the old one (with autocommit plus the turn's own items, which
  were commits of their own before the compaction);
* at random moments of a child that runs turn after turn;

and after each kill the history is checked: not empty, every turn the child reported
done is there (as an item or inside the summary that replaced it), no item twice
(a mix of the old and the new history would show some twice), at most one summary and
only at the start. Finally a child that is left alone compacts everything into one
summary that covers every turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PG_DSN, Target, make_target
from tests.flows import msg, need_sdk

pytestmark = [pytest.mark.sdk_flow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 120.0
#: Kills at a random moment: fewer where the fixed points cover the database.
RANDOM_KILLS = {"ours": 1, "wrapper": 2}
SEED = [msg("seed q1"), msg("seed a1", "assistant"), msg("seed q2")]
KINDS = [
    "sqlite-autocommit",
    "sqlite-buffered",
    "postgres-autocommit",
    "postgres-buffered",
    "wrapper-autocommit",
    "wrapper-buffered",
]


def text_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content)


class Place:
    """Where the child's history lives, and how to read and seed it from here."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.target: Target | None = None
        if kind.startswith("wrapper"):
            self.url = f"sqlite:///{tmp_path / 'sdk.db'}"
        else:
            self.target = make_target(kind.split("-")[0], tmp_path, request)
            self.url = self.target.url

    async def history(self, sid: str) -> list[Any]:
        if self.target is None:
            from agents import SQLiteSession as SDKSQLiteSession

            reader = SDKSQLiteSession(sid, self.url.removeprefix("sqlite:///"))
            try:
                return list(await reader.get_items())
            finally:
                reader.close()
        store = await self.target.open()
        try:
            return await store.session(sid).get_items()
        finally:
            await store.close()

    async def seed(self, sid: str) -> None:
        if self.target is None:
            from agents import SQLiteSession as SDKSQLiteSession

            writer = SDKSQLiteSession(sid, self.url.removeprefix("sqlite:///"))
            try:
                await writer.add_items(list(SEED))
            finally:
                writer.close()
            return
        store = await self.target.open()
        try:
            session = store.session(sid)
            await session.add_items(list(SEED))
            await session.commit()
        finally:
            await store.close()


class Child:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.done: list[str] = []

    async def expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), CHILD_TIMEOUT)
            if not line:
                raise AssertionError(f"child ended before {word!r}: {await self.errors()}")
            text = line.decode().strip()
            if text.startswith("done "):
                self.done.append(text.removeprefix("done "))
            if text == word:
                return

    async def kill(self) -> None:
        """SIGKILL; collect what it reported until then."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        code = await self._rest_then_exit()
        assert code == -signal.SIGKILL, (
            f"the child exited on its own ({code}): {await self.errors()}"
        )

    async def finish(self) -> None:
        code = await self._rest_then_exit()
        assert code == 0, await self.errors()

    async def _rest_then_exit(self) -> int:
        """Read the rest of what the child says (noting each ``done``), then its exit code."""
        assert self.proc.stdout is not None
        rest = await asyncio.wait_for(self.proc.stdout.read(), CHILD_TIMEOUT)
        for line in rest.decode().splitlines():
            if line.startswith("done "):
                self.done.append(line.removeprefix("done "))
        return await self.proc.wait()

    async def errors(self) -> str:
        if self.proc.stderr is None:
            return ""
        if self.proc.returncode is None:
            self.proc.kill()
        return (await self.proc.stderr.read()).decode(errors="replace")[-3000:]


async def spawn(place: Place, sid: str, point: str) -> Child:
    """Start a child; it imports everything, says ``ready`` and waits for :meth:`go`."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.compaction_child",
        place.kind,
        place.url,
        sid,
        point,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return Child(proc)


async def go(child: Child) -> Child:
    await child.expect("ready")
    assert child.proc.stdin is not None
    child.proc.stdin.write(b"go\n")
    await child.proc.stdin.drain()
    return child


def check(history: list[Any], reported: list[str], seed: list[Any]) -> list[str]:
    """What is wrong with ``history`` (empty list: nothing)."""
    if not history:
        return ["the history is empty"]
    texts: list[str] = []
    for index, item in enumerate(history):
        if item.get("type") == "compaction":
            if index != 0:
                return [f"a summary at position {index}: {history}"]
            texts.extend(json.loads(item["encrypted_content"]))
        else:
            texts.append(text_of(item))
    problems = []
    doubled = sorted({text for text in texts if texts.count(text) > 1})
    if doubled:
        problems.append(f"items present twice (old and new history mixed?): {doubled}")
    expected = [text_of(item) for item in seed]
    for turn in reported:
        expected += [f"turn {turn}", f"answer {turn}"]
    missing = [text for text in expected if text not in texts]
    if missing:
        problems.append(f"lost: {missing}")
    return problems


async def kill_at(place: Place, sid: str, point: str, started: Child, reported: list[str]) -> None:
    """Kill a child at ``point``; the history must be the old one (plus, with autocommit,
    the turn's own items, which were commits of their own before the compaction)."""
    before = await place.history(sid)
    in_postgres = place.kind.startswith("postgres") and point in ("delete", "insert")
    if in_postgres:
        await install_postgres_hang(place, sid, point)
    try:
        child = await go(started)
        if in_postgres:
            await postgres_sleepers(place, until=1)
        else:
            await child.expect("hung")
        await child.kill()
        if in_postgres:  # the server notices the dead client and aborts its transaction
            await postgres_sleepers(place, until=0)
    finally:
        if in_postgres:
            await drop_postgres_hang(place)
    after = await place.history(sid)
    if place.kind.endswith("buffered"):
        assert after == before, f"{point}: the whole transaction must be gone"
    else:
        assert after[: len(before)] == before, point
        turn = [text_of(item) for item in after[len(before) :]]
        assert len(turn) == 2 and turn[0].startswith("turn ") and turn[1].startswith("answer ")
        reported.append(turn[0].removeprefix("turn "))


@pytest.mark.parametrize("kind", KINDS)
async def test_sigkill_during_compaction_leaves_the_old_history_or_the_new_one(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, sid: str
) -> None:
    need_sdk("agents.testing")  # the model's response ids trigger automatic compaction
    need_sdk("compaction_snapshot" if kind.endswith("autocommit") else "compaction_session")
    place = Place(kind, tmp_path, request)
    await place.seed(sid)
    reported: list[str] = []  # turns a child said were done, or left stored when killed
    points = ["compact"] if kind.startswith("wrapper") else ["compact", "delete", "insert"]
    loops = RANDOM_KILLS["wrapper" if kind.startswith("wrapper") else "ours"]
    # Started together, so that their imports overlap; each waits for its turn.
    children = [await spawn(place, sid, point) for point in [*points, *["loop"] * loops, "once"]]
    try:
        for point, child in zip(points, children, strict=False):
            await kill_at(place, sid, point, child, reported)
            assert check(await place.history(sid), reported, SEED) == []
        rng = random.Random()
        for child in children[len(points) : len(points) + loops]:
            await go(child)
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            await child.kill()
            reported += child.done
            problems = check(await place.history(sid), reported, SEED)
            assert problems == [], problems
        last = await go(children[-1])
        await last.finish()
        reported += last.done
    finally:
        for child in children:
            if child.proc.returncode is None:
                child.proc.kill()
                await child.proc.wait()
    history = await place.history(sid)
    assert check(history, reported, SEED) == []
    assert len(history) == 1 and history[0]["type"] == "compaction", history


# --------------------------------------------------------------------------- PostgreSQL hang


async def _pg(place: Place) -> Any:
    import asyncpg

    assert place.target is not None
    conn = await asyncpg.connect(PG_DSN)
    await conn.execute(f'SET search_path TO "{place.target.pg_schema}"')
    return conn


async def install_postgres_hang(place: Place, sid: str, point: str) -> None:
    """A trigger that sleeps inside the transaction replacing ``sid``'s history: after a
    row of it is deleted, or before a compaction item is inserted."""
    conn = await _pg(place)
    quoted = sid.replace("'", "''")
    when = "AFTER DELETE" if point == "delete" else "BEFORE INSERT"
    try:
        await conn.execute(
            "CREATE OR REPLACE FUNCTION txs_test_sleep() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN IF TG_OP = 'DELETE' AND OLD.session_id = '{quoted}' "
            f"OR TG_OP = 'INSERT' AND NEW.session_id = '{quoted}' "
            "AND NEW.data LIKE '%\"compaction\"%' THEN PERFORM pg_sleep(3600); END IF; "
            "RETURN coalesce(NEW, OLD); END $$"
        )
        await conn.execute(
            f"CREATE TRIGGER txs_test_sleep {when} ON txs_items FOR EACH ROW "
            "EXECUTE FUNCTION txs_test_sleep()"
        )
    finally:
        await conn.close()


async def postgres_sleepers(place: Place, *, until: int) -> None:
    """Wait until ``until`` backends sleep in that trigger (0: the killed one is gone)."""
    assert place.target is not None
    conn = await _pg(place)
    pattern = f'%"{place.target.pg_schema}"%'
    try:
        for _ in range(int(CHILD_TIMEOUT / 0.02)):
            count = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                "AND query LIKE $1",
                pattern,
            )
            if count == until:
                return
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    raise AssertionError(f"never {until} backend(s) sleeping in the test trigger")


async def drop_postgres_hang(place: Place) -> None:
    conn = await _pg(place)
    try:
        await conn.execute("DROP TRIGGER IF EXISTS txs_test_sleep ON txs_items")
        await conn.execute("DROP FUNCTION IF EXISTS txs_test_sleep()")
    finally:
        await conn.close()

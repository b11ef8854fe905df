"""A child process that runs turns with compaction, for ``tests/reliability/test_compaction_crash.py``.

    python -m tests.compaction_child KIND URL SID POINT

``KIND``: ``sqlite-autocommit``, ``sqlite-buffered``, ``postgres-autocommit``,
``postgres-buffered`` (URL: ``sqlite:///path`` or ``postgresql://...?schema=s``), or
``wrapper-autocommit``, ``wrapper-buffered`` (``TransactionalSession`` over the SDK's
``SQLiteSession``; URL: ``sqlite:///path`` of its file).

Each cycle is one turn, ``turn <id>`` answered ``answer <id>``, through the SDK's real
``OpenAIResponsesCompactionSession`` (compaction forced after every turn, input mode, the
model sees the whole history, so the whole history is replaced) with a fake client
(``tests.flows.FakeCompactClient``). Buffered kinds run each turn in a transaction.
After a cycle's turn has returned (and committed) the child prints ``done <id>``.

``POINT`` is where the child stops for the parent to kill it:

* ``loop``: nowhere; cycles until killed (the parent kills at a random moment).
* ``once``: nowhere; one cycle, then exit 0.
* ``compact``: inside the compaction API call (the snapshot is taken, nothing replaced).
* ``delete`` / ``insert`` (our backends only): inside the database transaction that
  replaces the history, right after its first row of the old history was deleted /
  as it inserts the compaction output. SQLite: a temporary trigger on the store's own
  connection calls a function that blocks. PostgreSQL: a trigger the parent installed
  sleeps (``pg_sleep``); ``client_connection_check_interval`` makes the server notice the
  killed client and abort the transaction, as it would for a client that died.

The child prints ``ready`` once started, then waits for a line on stdin (so the parent
can start children ahead of time, while it does something else), and prints ``hung``
when it reaches ``POINT``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
import uuid
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.memory import OpenAIResponsesCompactionSession

from sessions import BufferedSession, SQLiteStore, Store, TransactionalSession, open_store
from tests.flows import FakeCompactClient
from tests.sdk import ScriptedModel, assistant_message


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def hang_forever() -> None:
    say("hung")
    await asyncio.get_running_loop().create_future()


def _block() -> int:
    say("hung")
    time.sleep(3600)
    return 0


async def install_sqlite_hang(store: SQLiteStore, sid: str, point: str) -> None:
    quoted = sid.replace("'", "''")
    if point == "delete":
        trigger = (
            "CREATE TEMP TRIGGER txs_test_hang AFTER DELETE ON main.txs_items "
            f"WHEN OLD.session_id = '{quoted}' BEGIN SELECT txs_test_hang(); END"
        )
    else:
        trigger = (
            "CREATE TEMP TRIGGER txs_test_hang BEFORE INSERT ON main.txs_items "
            f"WHEN NEW.session_id = '{quoted}' AND NEW.data LIKE '%\"compaction\"%' "
            "BEGIN SELECT txs_test_hang(); END"
        )

    def install(conn: sqlite3.Connection) -> None:
        conn.create_function("txs_test_hang", 0, _block)
        conn.execute(trigger)

    await store.sqlite.run(install)


async def open_session(kind: str, url: str, sid: str, point: str) -> tuple[BufferedSession, Any]:
    """The session, and what to close at the end."""
    autocommit = kind.endswith("autocommit")
    if kind.startswith("wrapper"):
        from agents import SQLiteSession as SDKSQLiteSession

        inner = SDKSQLiteSession(sid, url.removeprefix("sqlite:///"))
        return TransactionalSession(inner, autocommit=autocommit), inner
    options: dict[str, Any] = {}
    if kind.startswith("postgres"):
        # The server notices a dead client within 50 ms even while it sleeps in a trigger.
        options = {"min_size": 1, "max_size": 2}
        options["server_settings"] = {"client_connection_check_interval": "50"}
    store: Store[Any] = await open_store(url, **options)
    if point in ("delete", "insert") and isinstance(store, SQLiteStore):
        await install_sqlite_hang(store, sid, point)
    return store.session(sid, autocommit=autocommit), store


async def cycle(session: BufferedSession, kind: str, sid: str, point: str) -> None:
    turn = uuid.uuid4().hex[:10]
    client = FakeCompactClient(during=hang_forever if point == "compact" else None)
    compacting = OpenAIResponsesCompactionSession(
        sid,
        session,
        client=client,  # type: ignore[arg-type]
        compaction_mode="input",
        should_trigger_compaction=lambda _: True,
    )
    agent = Agent(name="worker", model=ScriptedModel([[assistant_message(f"answer {turn}")]]))
    config = RunConfig(tracing_disabled=True)
    if kind.endswith("buffered"):
        async with session.transaction():
            await Runner.run(agent, f"turn {turn}", session=compacting, run_config=config)
    else:
        await Runner.run(agent, f"turn {turn}", session=compacting, run_config=config)
    say(f"done {turn}")


async def main(kind: str, url: str, sid: str, point: str) -> None:
    say("ready")
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    session, owner = await open_session(kind, url, sid, point)
    try:
        while True:
            await cycle(session, kind, sid, point)
            if point != "loop":
                return
    finally:
        await session.close()
        close = owner.close()
        if asyncio.iscoroutine(close):
            await close


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))

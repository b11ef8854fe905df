"""(g) Peers: the stores users would pick instead, on the same agent turns.

Per turn, every subject does what the next turn of a chat agent does with its store:
read the session's whole history (what the turn would load), then append the turn's
four items (user message, tool call, tool output, assistant message) durably:

* ours: ``get_items()``, then ``add_items`` + ``commit()`` (SQLiteStore / PostgresStore);
* the SDK's ``SQLAlchemySession`` and ``AdvancedSQLiteSession``: ``get_items()``, then
  ``add_items`` (their own transaction);
* LangGraph (``AsyncSqliteSaver`` / ``AsyncPostgresSaver``): a compiled ``StateGraph``
  over ``MessagesState`` (the ``add_messages`` reducer) with the saver as its
  checkpointer, invoked once per turn with the four LangChain messages as input and
  ``thread_id`` = the session id: it loads the thread's checkpoint and writes the new
  one before ``ainvoke`` returns (``durability="exit"``: one checkpoint per turn, the
  fewest writes LangGraph offers that are durable when the call returns);
* Google ADK's ``DatabaseSessionService``: ``get_session`` (``create_session`` on a
  session's first turn), then one ``append_event`` per item (ADK's API stores one
  event per call, each its own transaction).

Sessions are ``peers_session_turns`` turns long, then the task starts a new one, so
every subject reads and writes histories of the same sizes. Two levels: one session at
a time, and many concurrent sessions (asyncio tasks). SQLite: one file per subject,
WAL and ``synchronous=FULL``; PostgreSQL: one fresh schema per subject, the same pool
size for all. Every subject's settings are read back from its own connections.
Afterwards each session is read back and must hold exactly four items (messages,
events) per completed turn; every history read during the run is checked too.

A peer whose package is missing is reported as *not installed* (``pip install
txsessions[bench-peers]``), unless ``--require-peers`` is given.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import math
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ._config import Config
from ._data import Item, make_turn
from ._subjects import (
    PG_SETTINGS,
    POSTGRES,
    SQLITE,
    OursPostgres,
    OursSQLite,
    SDKSQLAlchemy,
    Subject,
    aiosqlite_pragmas,
    engine_settings,
    merge_readings,
    pg_schema,
    sqlalchemy_pg_url,
    sqlite_pragmas,
)

Result = dict[str, Any]

EXTRA = "bench-peers"
INSTALL = f"pip install 'txsessions[{EXTRA}]'"
#: LangGraph's app and ADK's user of every session.
APP, USER = "bench", "bench-user"


# ----------------------------------------------------------------------------- items


def _lc_messages(items: list[Item]) -> list[Any]:
    """The LangChain messages equivalent to a turn's SDK items (no ids: ``add_messages``
    gives each a fresh one, as it does for a model's replies)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {
                "name": item["name"],
                "args": json.loads(item["arguments"]),
                "id": item["call_id"],
                "type": "tool_call",
            }
            out.append(AIMessage(content="", tool_calls=[call]))
        elif kind == "function_call_output":
            out.append(ToolMessage(content=item["output"], tool_call_id=item["call_id"]))
        elif item.get("role") == "user":
            out.append(HumanMessage(content=item["content"]))
        else:
            out.append(AIMessage(content=item["content"][0]["text"]))
    return out


def _adk_events(items: list[Item]) -> list[Any]:
    """The ADK events equivalent to a turn's SDK items, one invocation per turn."""
    from google.adk.events import Event
    from google.genai import types

    invocation = uuid.uuid4().hex
    names: dict[str, str] = {}
    out: list[Any] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            names[item["call_id"]] = item["name"]
            part = types.Part(
                function_call=types.FunctionCall(
                    id=item["call_id"], name=item["name"], args=json.loads(item["arguments"])
                )
            )
            role, author = "model", "assistant"
        elif kind == "function_call_output":
            part = types.Part(
                function_response=types.FunctionResponse(
                    id=item["call_id"],
                    name=names.get(item["call_id"], "tool"),
                    response=json.loads(item["output"]),
                )
            )
            role, author = "user", "assistant"
        elif item.get("role") == "user":
            part = types.Part(text=item["content"])
            role, author = "user", "user"
        else:
            part = types.Part(text=item["content"][0]["text"])
            role, author = "model", "assistant"
        content = types.Content(role=role, parts=[part])
        out.append(Event(author=author, invocation_id=invocation, content=content))
    return out


# ----------------------------------------------------------------------------- subjects


class Peer:
    """One store under test in (g): ``turn`` reads the history, then appends durably."""

    key = ""
    label = ""
    backend = SQLITE
    kind = "peer"  # "ours" | "peer"
    #: the distribution whose version the report prints
    package = ""

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def durability(self) -> dict[str, str]:
        return {}

    async def turn(self, sid: str, items: list[Item]) -> int:
        """Read the session's history, then store the turn durably; returns how many
        items (messages, events) the read returned."""
        raise NotImplementedError

    async def stored(self, sid: str) -> int:
        """How many items (messages, events) the session holds now."""
        raise NotImplementedError

    async def end(self, sid: str) -> None:
        """The session is over: drop whatever per-session object the subject keeps."""


class _Wrapped(Peer):
    """A benchmark subject of (a)-(d) (ours, the SDK's sessions) driven the peers' way."""

    def __init__(self, inner: Subject, kind: str, package: str, label: str = "") -> None:
        self.inner = inner
        self.key = inner.key
        self.label = label or inner.label
        self.backend = inner.backend
        self.kind = kind
        self.package = package

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def durability(self) -> dict[str, str]:
        return await self.inner.durability()

    async def turn(self, sid: str, items: list[Item]) -> int:
        history = await self.inner.read(sid, None)
        await self.inner.turn(sid, items)
        return len(history)

    async def stored(self, sid: str) -> int:
        return len(await self.inner.read(sid, None))

    async def end(self, sid: str) -> None:
        await self.inner.release(sid)


class _PgSchema(Peer):
    """A PostgreSQL subject with a fresh schema of its own (dropped on close)."""

    dsn = ""
    schema = ""

    async def _create_schema(self) -> None:
        await pg_schema(self.dsn, self.schema, drop=False)

    async def _drop_schema(self) -> None:
        await pg_schema(self.dsn, self.schema, drop=True)


class _WrappedPg(_Wrapped, _PgSchema):
    def __init__(self, inner: Subject, kind: str, package: str, dsn: str, schema: str) -> None:
        super().__init__(inner, kind, package)
        self.dsn, self.schema = dsn, schema

    async def open(self) -> None:
        await self._create_schema()
        await self.inner.open()

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            await self._drop_schema()


class SDKAdvancedSQLite(Peer):
    """``agents.extensions.memory.AdvancedSQLiteSession``: the SDK's SQLite session with
    conversation structure (turns, branches) recorded beside the items."""

    key = "sdk_advanced_sqlite"
    label = "SDK AdvancedSQLiteSession"
    backend = SQLITE
    package = "openai-agents"

    def __init__(self, path: str) -> None:
        self.path = path
        self._sessions: dict[str, Any] = {}

    def _session(self, sid: str, create: bool = False) -> Any:
        session = self._sessions.get(sid)
        if session is None:
            from agents.extensions.memory import AdvancedSQLiteSession

            session = AdvancedSQLiteSession(session_id=sid, db_path=self.path, create_tables=create)
            self._sessions[sid] = session
        return session

    async def open(self) -> None:
        # The structure tables once, as a deployment would, not per session object.
        await self._session("__bench_setup__", create=True).get_items(1)
        await self.end("__bench_setup__")

    async def durability(self) -> dict[str, str]:
        # Every connection the live session objects opened (one per worker thread).
        if not self._sessions:
            await self._session("__bench_durability__").get_items(1)
        conns = [c for s in self._sessions.values() for c in list(s._connections)]
        readings = [sqlite_pragmas(conn) for conn in conns]
        await self.end("__bench_durability__")
        return merge_readings(readings)

    async def turn(self, sid: str, items: list[Item]) -> int:
        session = self._session(sid)
        history = await session.get_items()
        await session.add_items(items)
        return len(history)

    async def stored(self, sid: str) -> int:
        found = len(await self._session(sid).get_items())
        await self.end(sid)
        return found

    async def end(self, sid: str) -> None:
        session = self._sessions.pop(sid, None)
        if session is not None:
            session.close()

    async def close(self) -> None:
        for sid in list(self._sessions):
            await self.end(sid)


def _graph(checkpointer: Any) -> Any:
    """A chat graph: ``MessagesState`` and one node (the model's reply arrives with the
    turn's input here, so the node adds nothing)."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    def agent(state: Any) -> dict[str, Any]:
        return {}

    builder: Any = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=checkpointer)


class _LangGraph(Peer):
    graph: Any = None

    @staticmethod
    def _config(sid: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": sid}}

    async def turn(self, sid: str, items: list[Item]) -> int:
        state = await self.graph.ainvoke(
            {"messages": _lc_messages(items)}, self._config(sid), durability="exit"
        )
        # What the turn loaded: the thread's messages before this turn's four.
        return len(state["messages"]) - len(items)

    async def stored(self, sid: str) -> int:
        snapshot = await self.graph.aget_state(self._config(sid))
        return len(snapshot.values.get("messages", []))


class LangGraphSQLite(_LangGraph):
    key = "langgraph_sqlite"
    label = "LangGraph AsyncSqliteSaver"
    backend = SQLITE
    package = "langgraph-checkpoint-sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: Any = None

    async def open(self) -> None:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        self.conn = await aiosqlite.connect(self.path)
        await self.conn.execute("PRAGMA journal_mode = WAL")
        await self.conn.execute("PRAGMA synchronous = FULL")
        saver = AsyncSqliteSaver(self.conn)
        await saver.setup()
        self.graph = _graph(saver)

    async def durability(self) -> dict[str, str]:
        return merge_readings([await aiosqlite_pragmas(self.conn)])

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


class LangGraphPostgres(_LangGraph, _PgSchema):
    key = "langgraph_pg"
    label = "LangGraph AsyncPostgresSaver"
    backend = POSTGRES
    package = "langgraph-checkpoint-postgres"

    def __init__(self, dsn: str, schema: str, pool: int) -> None:
        self.dsn, self.schema, self.size = dsn, schema, pool
        self.pool: Any = None

    async def open(self) -> None:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        await self._create_schema()
        # The connection settings LangGraph's own from_conn_string uses, in a pool.
        self.pool = AsyncConnectionPool(
            self.dsn,
            min_size=self.size,
            max_size=self.size,
            open=False,
            kwargs={
                "autocommit": True,
                "prepare_threshold": 0,
                "row_factory": dict_row,
                "options": f"-c search_path={self.schema}",
            },
        )
        await self.pool.open(wait=True)
        saver = AsyncPostgresSaver(self.pool)
        await saver.setup()
        self.graph = _graph(saver)

    async def durability(self) -> dict[str, str]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [list(PG_SETTINGS)]
            )
            found = {row["name"]: row["setting"] for row in await cursor.fetchall()}
        return merge_readings([{name: found.get(name, "?") or "''" for name in PG_SETTINGS}])

    async def close(self) -> None:
        try:
            if self.pool is not None:
                await self.pool.close()
                self.pool = None
        finally:
            await self._drop_schema()


class ADKDatabase(_PgSchema):
    """Google ADK's ``DatabaseSessionService`` (SQLAlchemy async: aiosqlite, asyncpg)."""

    package = "google-adk"

    def __init__(self, url: str, backend: str, **engine_kwargs: Any) -> None:
        self.url, self.backend, self.engine_kwargs = url, backend, engine_kwargs
        self.key = f"adk_{'sqlite' if backend == SQLITE else 'pg'}"
        driver = "aiosqlite" if backend == SQLITE else "asyncpg"
        self.label = f"ADK DatabaseSessionService ({driver})"
        self.service: Any = None

    async def open(self) -> None:
        from google.adk.sessions import DatabaseSessionService

        if self.backend == POSTGRES:
            await self._create_schema()
        self.service = DatabaseSessionService(self.url, **self.engine_kwargs)
        if self.backend == SQLITE:
            from sqlalchemy import event

            # Every connection of ADK's engine, before its first one is opened (ADK's
            # own connect hook, foreign keys on, stays).
            event.listen(self.service.db_engine.sync_engine, "connect", _wal_full)

    async def durability(self) -> dict[str, str]:
        return merge_readings([await engine_settings(self.service.db_engine, self.backend)])

    async def _get(self, sid: str) -> Any:
        return await self.service.get_session(app_name=APP, user_id=USER, session_id=sid)

    async def turn(self, sid: str, items: list[Item]) -> int:
        session = await self._get(sid)
        if session is None:
            session = await self.service.create_session(app_name=APP, user_id=USER, session_id=sid)
        read = len(session.events)
        for event in _adk_events(items):
            await self.service.append_event(session, event)
        return read

    async def stored(self, sid: str) -> int:
        session = await self._get(sid)
        return 0 if session is None else len(session.events)

    async def close(self) -> None:
        try:
            if self.service is not None:
                await self.service.close()
                self.service = None
        finally:
            if self.backend == POSTGRES:
                await self._drop_schema()


def _wal_full(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
    finally:
        cursor.close()


# ----------------------------------------------------------------------------- catalogue


@dataclass(frozen=True)
class Spec:
    """One subject of (g): what it needs installed and how to make it."""

    key: str
    label: str
    backend: str
    package: str
    modules: tuple[str, ...]
    make: Callable[[Any], Peer]


@dataclass
class Where:
    """Where the subjects of one backend store: a directory (SQLite) or a server."""

    directory: str = ""
    dsn: str = ""
    schema: str = ""
    pool: int = 2

    def path(self, key: str) -> str:
        return os.path.join(self.directory, f"g-{key}.db")

    def own_schema(self, key: str) -> str:
        return f"{self.schema}_{key}"


def _pg_engine(where: Where, key: str) -> dict[str, Any]:
    return {
        "pool_size": where.pool,
        "max_overflow": 0,
        "connect_args": {"server_settings": {"search_path": where.own_schema(key)}},
    }


SPECS: tuple[Spec, ...] = (
    # --- SQLite
    Spec(
        "ours_sqlite",
        "txsessions SQLiteStore",
        SQLITE,
        "txsessions",
        ("sessions",),
        lambda w: _Wrapped(OursSQLite(w.path("ours")), "ours", "txsessions"),
    ),
    Spec(
        "sdk_sqlalchemy_sqlite",
        "SDK SQLAlchemySession (aiosqlite)",
        SQLITE,
        "openai-agents",
        ("agents.extensions.memory", "sqlalchemy", "aiosqlite"),
        lambda w: _Wrapped(
            SDKSQLAlchemy(f"sqlite+aiosqlite:///{w.path('sqla')}", SQLITE),
            "peer",
            "openai-agents",
        ),
    ),
    Spec(
        "sdk_advanced_sqlite",
        SDKAdvancedSQLite.label,
        SQLITE,
        "openai-agents",
        ("agents.extensions.memory.advanced_sqlite_session",),
        lambda w: SDKAdvancedSQLite(w.path("advanced")),
    ),
    Spec(
        "langgraph_sqlite",
        LangGraphSQLite.label,
        SQLITE,
        "langgraph-checkpoint-sqlite",
        ("langgraph.checkpoint.sqlite.aio", "langgraph.graph", "aiosqlite"),
        lambda w: LangGraphSQLite(w.path("langgraph")),
    ),
    Spec(
        "adk_sqlite",
        "ADK DatabaseSessionService (aiosqlite)",
        SQLITE,
        "google-adk",
        ("google.adk.sessions", "sqlalchemy", "aiosqlite"),
        lambda w: ADKDatabase(f"sqlite+aiosqlite:///{w.path('adk')}", SQLITE),
    ),
    # --- PostgreSQL
    Spec(
        "ours_pg",
        "txsessions PostgresStore",
        POSTGRES,
        "txsessions",
        ("sessions.postgres", "asyncpg"),
        lambda w: _WrappedPg(
            OursPostgres(w.dsn, w.own_schema("ours_pg"), w.pool),
            "ours",
            "txsessions",
            w.dsn,
            w.own_schema("ours_pg"),
        ),
    ),
    Spec(
        "sdk_sqlalchemy_pg",
        "SDK SQLAlchemySession (asyncpg)",
        POSTGRES,
        "openai-agents",
        ("agents.extensions.memory", "sqlalchemy", "asyncpg"),
        lambda w: _WrappedPg(
            SDKSQLAlchemy(sqlalchemy_pg_url(w.dsn), POSTGRES, **_pg_engine(w, "sdk_sqlalchemy_pg")),
            "peer",
            "openai-agents",
            w.dsn,
            w.own_schema("sdk_sqlalchemy_pg"),
        ),
    ),
    Spec(
        "langgraph_pg",
        LangGraphPostgres.label,
        POSTGRES,
        "langgraph-checkpoint-postgres",
        ("langgraph.checkpoint.postgres.aio", "langgraph.graph", "psycopg", "psycopg_pool"),
        lambda w: LangGraphPostgres(w.dsn, w.own_schema("langgraph_pg"), w.pool),
    ),
    Spec(
        "adk_pg",
        "ADK DatabaseSessionService (asyncpg)",
        POSTGRES,
        "google-adk",
        ("google.adk.sessions", "sqlalchemy", "asyncpg"),
        lambda w: _adk_pg(w),
    ),
)

#: the distributions whose versions the results header prints
PACKAGES = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "langchain-core",
    "psycopg",
    "psycopg-pool",
    "google-adk",
)


def _adk_pg(where: Where) -> Peer:
    peer = ADKDatabase(sqlalchemy_pg_url(where.dsn), POSTGRES, **_pg_engine(where, "adk_pg"))
    peer.dsn, peer.schema = where.dsn, where.own_schema("adk_pg")
    return peer


def missing(spec: Spec) -> list[str]:
    """The modules of ``spec`` that cannot be imported here."""
    out = []
    for module in spec.modules:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            out.append(module)
    return out


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


# ----------------------------------------------------------------------------- workload


def _pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def per_task_turns(cfg: Config, level: int) -> int:
    """Turns each task makes at ``level``: whole sessions, about ``peers_turns`` in all."""
    sessions = max(1, math.ceil(cfg.peers_turns / (level * cfg.peers_session_turns)))
    return sessions * cfg.peers_session_turns


async def _cell(peer: Peer, level: int, cfg: Config, tag: str, turns: list[list[Item]]) -> Result:
    """``level`` tasks, each making whole sessions of ``len(turns)`` turns until its
    share is done (or the time budget is spent: no new turn starts after it)."""
    share = per_task_turns(cfg, level)
    length = len(turns)
    done: dict[str, int] = {}  # session -> completed turns
    broken: set[str] = set()  # sessions a failed turn left in an unknown state
    latencies: list[float] = []
    errors: list[str] = []
    mismatches: list[str] = []
    deadline = 0.0
    stopped: list[int] = []  # tasks the time budget stopped

    async def task(t: int) -> None:
        n = 0
        while n < share:
            if time.perf_counter() >= deadline:
                stopped.append(t)
                return
            sid = f"g{tag}-{t}-{n // length}"
            k = n % length
            t0 = time.perf_counter()
            try:
                read = await peer.turn(sid, turns[k])
            except Exception as exc:  # noqa: BLE001 - counted, reported
                errors.append(f"{type(exc).__name__}: {exc}")
                broken.add(sid)
                n += length - k  # this session is abandoned: the next one starts
                continue
            latencies.append(time.perf_counter() - t0)
            done[sid] = k + 1
            if read != 4 * k:
                mismatches.append(f"{sid} turn {k + 1} read {read}, expected {4 * k}")
            n += 1
            if n % length == 0:
                await peer.end(sid)

    # Warm-up (connections, prepared statements, tables): one turn per task.
    await asyncio.gather(*(_warm(peer, f"w{tag}-{t}", turns[0]) for t in range(level)))
    gc.collect()
    start = time.perf_counter()
    deadline = start + cfg.peers_timeout
    await asyncio.gather(*(task(t) for t in range(level)))
    elapsed = time.perf_counter() - start
    ok = len(latencies)
    verified, wrong = await _verify(peer, done, broken)
    kinds: dict[str, int] = {}
    for message in errors:
        kinds[message[:160]] = kinds.get(message[:160], 0) + 1
    return {
        "turns": ok,
        "attempted": level * share,
        "seconds": elapsed,
        "turns_per_s": ok / elapsed if elapsed > 0 else math.nan,
        "latencies": latencies,
        "errors": len(errors),
        "error_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:5]),
        "stopped": bool(stopped),
        "read_mismatches": len(mismatches),
        "read_mismatch_examples": mismatches[:3],
        "verified": verified and not mismatches,
        "verify_problems": wrong[:3],
        "sessions_checked": len(done) - len(broken & set(done)),
    }


async def _warm(peer: Peer, sid: str, items: list[Item]) -> None:
    try:
        await peer.turn(sid, items)
    finally:
        await peer.end(sid)


async def _verify(peer: Peer, done: dict[str, int], broken: set[str]) -> tuple[bool, list[str]]:
    """Every session a subject completed turns in holds exactly 4 items per turn."""
    wrong: list[str] = []
    for sid, turns in done.items():
        if sid in broken:
            continue
        found = await peer.stored(sid)
        if found != 4 * turns:
            wrong.append(f"{sid}: {found} stored, expected {4 * turns}")
        await peer.end(sid)
    return not wrong, wrong


def _merge(cells: list[Result]) -> Result:
    rates = [c["turns_per_s"] for c in cells]
    latencies = [x for c in cells for x in c["latencies"]]
    kinds: dict[str, int] = {}
    for cell in cells:
        for kind, n in cell["error_kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    return {
        "turns_per_s": statistics.median(rates),
        "rounds": rates,
        "p50_ms": _pct(latencies, 0.50) * 1e3,
        "p99_ms": _pct(latencies, 0.99) * 1e3,
        "turns": sum(c["turns"] for c in cells),
        "attempted": sum(c["attempted"] for c in cells),
        "seconds": sum(c["seconds"] for c in cells),
        "errors": sum(c["errors"] for c in cells),
        "error_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:5]),
        "stopped": any(c["stopped"] for c in cells),
        "read_mismatches": sum(c["read_mismatches"] for c in cells),
        "verified": all(c["verified"] for c in cells),
        "problems": [p for c in cells for p in c["verify_problems"] + c["read_mismatch_examples"]][
            :3
        ],
        "sessions_checked": sum(c["sessions_checked"] for c in cells),
    }


def _rotate(items: list[Spec], n: int) -> list[Spec]:
    if not items:
        return []
    k = n % len(items)
    return items[k:] + items[:k]


async def _open(peer: Peer) -> str | None:
    """Open ``peer``; what went wrong, if it could not."""
    try:
        await peer.open()
    except Exception as exc:  # noqa: BLE001 - reported in the results
        try:
            await peer.close()
        except Exception:  # noqa: BLE001 - closing what half opened is best effort
            pass
        return f"cannot open: {type(exc).__name__}: {exc}"
    return None


async def _backend(
    backend: str,
    where: Where,
    cfg: Config,
    require: bool,
    progress: Callable[[str], None],
) -> Result:
    """Every subject of ``backend``, level by level, rounds interleaved (order rotating).
    A subject is open only for its own cell (PostgreSQL: a fresh schema each time, and
    never two pools at once), and its settings are read back after its last cell."""
    out: Result = {}
    specs: list[Spec] = []
    for spec in SPECS:
        if spec.backend != backend:
            continue
        entry = out[spec.key] = {
            "label": spec.label,
            "kind": "ours" if spec.package == "txsessions" else "peer",
            "package": spec.package,
            "version": version(spec.package),
            "levels": {},
        }
        absent = missing(spec)
        if not absent:
            specs.append(spec)
            continue
        if require:
            raise SystemExit(
                f"--require-peers: {spec.label} cannot run here (no {', '.join(absent)}); {INSTALL}"
            )
        entry["missing"] = f"not installed (no {', '.join(absent)}; {INSTALL})"
        progress(f"  (g) {spec.key}: not installed")
    turns = [make_turn(k, seed=7) for k in range(cfg.peers_session_turns)]
    failed: set[str] = set()
    last = (len(cfg.peers_levels) - 1, cfg.peers_rounds - 1)
    for i, level in enumerate(cfg.peers_levels):
        cells: dict[str, list[Result]] = {}
        for r in range(cfg.peers_rounds):
            for spec in _rotate(specs, i + r):
                if spec.key in failed:
                    continue
                peer = spec.make(where)
                problem = await _open(peer)
                if problem is not None:
                    failed.add(spec.key)
                    out[spec.key]["error"] = problem
                    progress(f"  (g) {spec.key}: {problem}")
                    continue
                try:
                    cell = await _cell(peer, level, cfg, f"{level}r{r}", turns)
                    if (i, r) == last:
                        out[spec.key]["durability"] = await _settings(peer)
                finally:
                    try:
                        await peer.close()
                    except Exception as exc:  # noqa: BLE001 - closing is best effort
                        progress(f"  (g) closing {spec.key} failed: {exc}")
                cells.setdefault(spec.key, []).append(cell)
                progress(
                    f"  (g) {backend} {spec.key:<22} x{level:<4} round {r + 1}: "
                    f"{cell['turns_per_s']:8.1f} turns/s  errors={cell['errors']}"
                    f"{'' if cell['verified'] else '  NOT VERIFIED'}"
                    f"{'  (time budget)' if cell['stopped'] else ''}"
                )
        for key, found in cells.items():
            out[key]["levels"][str(level)] = _merge(found)
    return out


async def _settings(peer: Peer) -> dict[str, str]:
    try:
        return await peer.durability()
    except Exception as exc:  # noqa: BLE001 - reported in the results
        return {"error": f"{type(exc).__name__}: {exc}"}


async def run(
    backends: list[str],
    cfg: Config,
    *,
    directory: str,
    dsn: str,
    schema: str,
    require: bool,
    progress: Callable[[str], None],
) -> Result:
    """(g) on every backend asked for; ``results["peers"]``."""
    result: Result = {
        "session_turns": cfg.peers_session_turns,
        "levels": list(cfg.peers_levels),
        "turns": cfg.peers_turns,
        "rounds": cfg.peers_rounds,
        "pool": cfg.pool,
        "budget_s": cfg.peers_timeout,
        "versions": {p: version(p) for p in PACKAGES},
    }
    if SQLITE in backends:
        progress("(g) peers on SQLite")
        result[SQLITE] = await _backend(SQLITE, Where(directory=directory), cfg, require, progress)
    if POSTGRES in backends:
        progress("(g) peers on PostgreSQL")
        where = Where(dsn=dsn, schema=f"{schema}_g", pool=cfg.pool)
        result[POSTGRES] = await _backend(POSTGRES, where, cfg, require, progress)
    return result

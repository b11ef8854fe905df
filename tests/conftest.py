"""Shared fixtures: one contract suite, every backend.

``target`` is parametrized over the backends. Each target knows how to open a store
on the same database (``await target.open()``, as often as a test likes, e.g. to play
a second process) and how a child process can reach it (``target.url``).

PostgreSQL: the DSN comes from ``SESSIONS_TEST_POSTGRES_DSN``, else
``postgresql://postgres@127.0.0.1:5432/postgres``. Each test run works in a schema of
its own, dropped at the end. When no server answers, PostgreSQL tests are skipped with
one line saying why, except when ``CI`` is set: then they fail.

Under ``CI`` no skip passes silently: ``tests/skip_policy.py`` (its hooks are imported
below) turns every skip whose reason is not on its short allow-list into a failure.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sessions import MemoryStore, SQLiteStore, Store
from sessions._redact import redact
from tests.skip_policy import (  # noqa: F401 - pytest hooks, registered by being here
    in_ci,
    pytest_make_collect_report,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DSN = os.environ.get("SESSIONS_TEST_POSTGRES_DSN", DEFAULT_PG_DSN)
IN_CI = in_ci()

BACKENDS = ["sqlite", "postgres"]


def run_outside_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run`` in a thread of its own: works whether or not a loop is running here."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _probe_postgres() -> str | None:
    """``None`` when the server answers, else why not."""
    try:
        import asyncpg
    except ImportError:
        return "asyncpg is not installed (pip install 'txsessions[test]')"

    async def probe() -> None:
        conn = await asyncpg.connect(PG_DSN, timeout=5)
        await conn.close()

    try:
        run_outside_loop(probe())
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        return redact(f"no PostgreSQL at {PG_DSN}: {type(exc).__name__}: {exc}", [PG_DSN])
    return None


_PG_PROBLEM: str | None | bool = False  # False: not probed yet


def postgres_problem() -> str | None:
    global _PG_PROBLEM
    if _PG_PROBLEM is False:
        _PG_PROBLEM = _probe_postgres()
    assert _PG_PROBLEM is not True
    return _PG_PROBLEM


def require_postgres() -> None:
    problem = postgres_problem()
    if problem is None:
        return
    if IN_CI:
        pytest.fail(f"CI is set, so PostgreSQL tests must run: {problem}", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def pg_schema() -> Iterator[str]:
    """A schema of this test run's own, dropped afterwards."""
    require_postgres()
    import asyncpg

    name = f"txs_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield name

    async def drop() -> None:
        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()

    run_outside_loop(drop())


@dataclass
class Target:
    """A database that tests can open stores on, in this process or in a child."""

    kind: str
    url: str
    sqlite_path: str | None = None
    pg_schema: str | None = None
    opened: list[Store[Any]] = field(default_factory=list)

    async def open(self, **options: Any) -> Store[Any]:
        store: Store[Any]
        if self.kind == "sqlite":
            assert self.sqlite_path is not None
            store = await SQLiteStore.open(self.sqlite_path, **options)
        else:
            from sessions.postgres import PostgresStore

            options.setdefault("min_size", 1)
            options.setdefault("max_size", 4)
            assert self.pg_schema is not None
            store = await PostgresStore.open(PG_DSN, schema=self.pg_schema, **options)
        self.opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()
        self.opened.clear()


def make_target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    if kind == "sqlite":
        path = str(tmp_path / "sessions.db")
        return Target("sqlite", f"sqlite:///{path}", sqlite_path=path)
    require_postgres()
    schema = request.getfixturevalue("pg_schema")
    return Target("postgres", f"{PG_DSN}?schema={schema}", pg_schema=schema)


@pytest.fixture(params=BACKENDS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    t = make_target(request.param, tmp_path, request)
    yield t
    await t.close_all()


@pytest.fixture
async def store(target: Target) -> Store[Any]:
    return await target.open()


@pytest.fixture(params=[*BACKENDS, "memory"])
async def tstore(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store[Any]]:
    """A store on every backend, ``MemoryStore`` (the reference) included."""
    if request.param == "memory":
        memory = await MemoryStore.open()
        yield memory
        await memory.close()
        return
    target = make_target(request.param, tmp_path, request)
    yield await target.open()
    await target.close_all()


@pytest.fixture
def sid() -> str:
    """A fresh session id (runs share a PostgreSQL schema; ids keep tests apart)."""
    return f"s-{uuid.uuid4().hex}"

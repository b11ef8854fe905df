"""What every test backend offers: the one place tests ask a backend-specific question.

A ``Provision`` is a database that tests open stores on (in this process, or in a child
through ``url``), read and write raw rows of, and inject faults into. Each backend answers
in its own module (``sqlite.py``, ``postgres.py``, ``memory.py``); tests call these methods
instead of branching on ``kind``.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from sessions import BufferedSession, Store

if TYPE_CHECKING:
    from tests.reliability.invariant import RawSession

#: A hang that nobody releases ends by itself after this long (tests never hang forever).
SAFETY = 30.0


class Hang:
    """A commit stopped inside the database until ``release()``."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    async def reached(self) -> None:
        """Wait until the database is hung inside the commit."""
        if not await asyncio.to_thread(self.entered.wait, SAFETY):
            raise AssertionError("the commit never reached the hang")

    def release(self) -> None:
        self.released.set()


class RawReader(ABC):
    """Reads sessions' raw rows (one snapshot a read), possibly over one kept connection."""

    @abstractmethod
    async def read(self, session_id: str) -> RawSession: ...

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> RawReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Provision(ABC):
    """A database of one backend that tests open stores on."""

    #: The backend's name (test ids, messages, the CLI's ``stats``).
    kind: ClassVar[str]
    #: Whether the store waits for pooled connections (PostgreSQL) or has one (SQLite).
    pooled: ClassVar[bool] = False
    #: Whether other tests share the database, so a test removes the sessions it made.
    shared: bool = False
    #: The table that records the applied schema migrations.
    schema_table: ClassVar[str] = "txs_schema"

    url: str
    sqlite_path: str | None = None
    pg_schema: str | None = None
    prefix: str = "txs_"

    def __init__(self) -> None:
        self.opened: list[Store[Any]] = []
        self.temp_dir: str | None = None  # removed by drop()

    # ---------------------------------------------------------------- stores and sessions

    @classmethod
    def problem(cls) -> str | None:
        """Why the backend cannot run here (``None``: it can)."""
        return None

    @classmethod
    def require(cls) -> None:
        """Skip (or under CI fail) the test when the backend cannot run here."""
        return None

    @classmethod
    def test_schema(cls, request: pytest.FixtureRequest) -> str | None:
        """The test run's PostgreSQL schema, for backends that live in one."""
        return None

    @classmethod
    @abstractmethod
    def for_test(cls, tmp_path: Path, request: pytest.FixtureRequest) -> Provision:
        """A database for one test (in ``tmp_path``, or the run's shared schema)."""

    @classmethod
    @abstractmethod
    def new(
        cls, directory: str | None = None, *, name: str = "txs_rel", schema: str | None = None
    ) -> Provision:
        """A database of its own (a file in ``directory``, a new schema, a new memory
        backend; a given PostgreSQL ``schema``, shared, instead); ``drop()`` removes what it
        made."""

    async def prepare(self) -> None:
        """Create the store's tables now (before sessions race to create them)."""
        await (await self.open_store()).close()

    async def open(self, **options: Any) -> Store[Any]:
        store = await self.open_store(**options)
        self.opened.append(store)
        return store

    @abstractmethod
    async def open_store(self, **options: Any) -> Store[Any]:
        """A store on this database, not recorded for ``close_all``."""

    @abstractmethod
    def session(self, session_id: str, **options: Any) -> BufferedSession:
        """The backend's one-liner session (it owns a store of its own)."""

    @abstractmethod
    def fresh(self, directory: Path) -> Provision:
        """An empty store next to this one (a new file, or a new table prefix); the stores
        opened on it are closed by this one's ``close_all()``."""

    async def close_all(self) -> None:
        for store in self.opened:
            await store.close()
        self.opened.clear()

    async def drop(self) -> None:
        """Close every store opened here and remove what ``new()`` created."""
        await self.close_all()
        await self.remove()

    async def remove(self) -> None:
        return None

    # ---------------------------------------------------------------- raw SQL

    def table(self, name: str) -> str:
        """The name of one of the store's tables (``"sessions"`` → ``txs_sessions``)."""
        return f"{self.prefix}{name}"

    def param(self, n: int) -> str:
        """The n-th placeholder of a raw statement."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    def epoch(self, mark: str) -> str:
        """A timestamp column's value for the epoch seconds ``mark`` (SQL)."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    def ago(self, column: str, seconds: int) -> str:
        """``column`` moved ``seconds`` into the past (SQL)."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    async def execute(self, sql: str, *args: Any) -> None:
        """Run one statement; ``param(n)`` writes the n-th placeholder."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    async def fetch_value(self, sql: str, *args: Any) -> Any:
        """The first column of the first row of a query; never takes a write lock."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    def stamp(self, when: datetime) -> Any:
        """``when`` as a timestamp column stores it (a raw statement's argument)."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    async def bulk_insert(
        self, table: str, columns: list[str], rows: Sequence[tuple[Any, ...]]
    ) -> None:
        """Insert ``rows`` into the store's ``table`` (``"items"``: ``txs_items``) at once."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    def raw_reader(self) -> RawReader:
        raise NotImplementedError(f"{self.kind}: no raw rows")

    async def integrity_problem(self) -> str | None:
        """What the engine's own integrity check finds wrong with the database file."""
        return None

    async def tables_with_column(self, column: str) -> list[str]:
        """The names of the store's tables that have ``column``."""
        raise NotImplementedError(f"{self.kind}: no raw SQL")

    def session_tables(self) -> list[str]:
        """The tables a session's rows live in, as the backend lists them."""
        raise NotImplementedError(f"{self.kind}: no tables")

    # ---------------------------------------------------------------- fault injection

    async def add_poison_trigger(self, session_id: str) -> None:
        """Make the database reject, mid-batch, any item of ``session_id`` containing
        "poison"."""
        raise NotImplementedError(f"{self.kind}: no triggers")

    async def drop_poison_trigger(self) -> None:
        raise NotImplementedError(f"{self.kind}: no triggers")

    async def add_failing_trigger(self, table: str, session_id: str, event: str = "INSERT") -> None:
        """Make the database reject, inside the writer's transaction, every row of
        ``session_id`` that it inserts into ``table`` (``event="DELETE"``: deletes from it),
        with a real trigger raising an error."""
        raise NotImplementedError(f"{self.kind}: no triggers")

    async def drop_failing_trigger(self, table: str) -> None:
        raise NotImplementedError(f"{self.kind}: no triggers")

    def hang(
        self, store: Store[Any], session_id: str, where: str
    ) -> AbstractAsyncContextManager[Hang]:
        """Make the next commit of ``session_id`` hang in the database at ``where``
        (``"first"``: its first write; ``"middle"``: between two statements)."""
        raise NotImplementedError(f"{self.kind}: no hang")

    def writes_held(self) -> AbstractAsyncContextManager[None]:
        """Hold the database's write lock from another connection for the block."""
        raise NotImplementedError(f"{self.kind}: no write lock")

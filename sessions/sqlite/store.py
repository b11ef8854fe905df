"""SQLiteStore (one database shared by many sessions) and SQLiteSession (the one-liner)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._engine.session import BufferedSession
from .._engine.store import Store
from .._engine.storebase import BackendView, borrowed_store
from .._model.options import STORE_KEYWORDS, check_keywords, session_keywords, store_options
from .._model.validate import validate_seconds
from .backend import SQLiteBackend
from .connection import Synchronous
from .connection import validate_path as _validate_path
from .connection import validate_synchronous as _validate_synchronous

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._model.options import SessionKeywords, StoreKeywords

__all__ = ["SQLiteSession", "SQLiteStore"]


class SQLiteSession(BufferedSession):
    """A buffered session stored in SQLite.

    ``SQLiteSession(session_id, "chat.db")`` opens its own connection on first use and
    closes it in :meth:`close`; fine for scripts. Threads that each run an event loop of
    their own may share it: each loop gets a connection of its own (``docs/threads.md``). ``db_path`` defaults to a private
    in-memory database. Servers should share one :class:`SQLiteStore` and call
    ``store.session(session_id)`` (or pass ``store=``, which is borrowed: then
    ``db_path`` and ``synchronous`` belong to the store and may not be given).
    """

    def __init__(
        self,
        session_id: str,
        db_path: str | os.PathLike[str] | None = None,
        *,
        synchronous: Synchronous | None = None,
        store: SQLiteStore | None = None,
        **keywords: Unpack[SessionKeywords],
    ) -> None:
        settings, common = session_keywords(keywords, "SQLiteSession")
        if store is not None:
            owned = {"db_path": db_path, "synchronous": synchronous}
            borrowed = borrowed_store(store, SQLiteStore, "SQLiteSession", owned)
            super().__init__(session_id, store=borrowed, **common)
            return
        path = _validate_path(":memory:" if db_path is None else db_path)
        sync = _validate_synchronous("FULL" if synchronous is None else synchronous)
        store_timeout = settings.commit_timeout  # None: the store's default

        async def factory() -> Store[Any]:
            return await SQLiteStore.open(path, synchronous=sync, commit_timeout=store_timeout)

        # Each event loop using the session gets a store (connection) of its own on the
        # same file; a private in-memory database cannot be shared that way.
        single = "its private in-memory database" if path == ":memory:" else None
        super().__init__(session_id, store_factory=factory, single_loop=single, **common)


class SQLiteStore(Store["SQLiteSession"]):
    """One SQLite database shared by many sessions (one connection in all).

    ``store = await SQLiteStore.open("chat.db")``, then ``store.session(session_id)``.
    """

    backend_class = SQLiteBackend
    session_class = SQLiteSession
    sqlite = BackendView(SQLiteBackend)

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str] = ":memory:",
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
        **keywords: Unpack[StoreKeywords],
    ) -> SQLiteStore:
        """Open (creating if needed) the database at ``path``.

        ``synchronous="FULL"`` (default) makes every commit durable across power loss;
        ``"NORMAL"`` trades the last commits on power loss (never on a process crash)
        for speed. ``busy_timeout`` is how long a commit waits for other writers.
        ``commit_timeout`` bounds how long a commit may hold its caller (seconds).
        ``ttl``: the store's default idle time-to-live, see :meth:`~sessions.Store.purge`.
        ``integrity``: what commits do with history the Responses API would refuse
        (``"quarantine"``, ``"reject"`` or ``"off"``; ``docs/history.md``). ``retry``: a
        :class:`~sessions.RetryPolicy`. ``None`` takes a setting's default; the four may
        also come as ``options=StoreOptions(...)`` (:class:`~sessions._model.options.StoreKeywords`).
        """
        check_keywords(keywords, STORE_KEYWORDS, "SQLiteStore.open")
        db_path = _validate_path(path)
        _validate_synchronous(synchronous)
        validate_seconds(busy_timeout, "busy_timeout", allow_zero=True)
        settings = store_options(keywords, "SQLiteStore.open")
        backend = await SQLiteBackend.open(
            db_path, synchronous=synchronous, busy_timeout=busy_timeout
        )
        return cls.opened(backend, settings, "open")

    @property
    def path(self) -> str:
        """The database file's path as opened (``":memory:"`` for an in-memory database)."""
        return self.sqlite.path

    def _describe(self) -> str:
        return f"SQLiteStore {self.path!r}"

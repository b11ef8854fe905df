"""The PostgreSQL store and one-liner session: :class:`PostgresStore` (one asyncpg pool
shared by many sessions) and :class:`PostgresSession`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg  # type: ignore[import-untyped]

from .._engine.session import BufferedSession
from .._engine.store import Store
from .._engine.storebase import BackendView, borrowed_store
from .._model.options import (
    STORE_KEYWORDS,
    StoreOptions,
    check_keywords,
    merge_options,
    session_keywords,
    store_options,
)
from .._model.policy import Integrity, RetryPolicy
from .backend import PostgresBackend
from .connect import _create_pool, _pool_options, _validate_pool_size
from .sql import _validate_names

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._model.options import SessionKeywords, StoreKeywords

__all__ = ["PostgresSession", "PostgresStore"]


class PostgresSession(BufferedSession):
    """A buffered session stored in PostgreSQL.

    ``PostgresSession(session_id, dsn)`` opens a small pool of its own on first use and
    closes it in :meth:`close`: fine for scripts, not for servers (one pool per
    session). Threads that each run an event loop of their own may share it: each loop
    gets a pool of its own (``docs/threads.md``). Servers share one :class:`PostgresStore` and call
    ``store.session(session_id)`` (or pass ``store=``, which is borrowed, not closed;
    then ``dsn``, ``schema`` and ``table_prefix`` belong to the store and may not be given).
    """

    def __init__(
        self,
        session_id: str,
        dsn: str | None = None,
        *,
        schema: str | None = None,
        table_prefix: str | None = None,
        store: PostgresStore | None = None,
        **keywords: Unpack[SessionKeywords],
    ) -> None:
        settings, common = session_keywords(keywords, "PostgresSession")
        if store is not None:
            owned = {"dsn": dsn, "schema": schema, "table_prefix": table_prefix}
            borrowed = borrowed_store(store, PostgresStore, "PostgresSession", owned)
            super().__init__(session_id, store=borrowed, **common)
            return
        if not isinstance(dsn, str) or not dsn:
            raise TypeError(
                "PostgresSession needs a dsn (a non-empty str) or store=, "
                f"got a {type(dsn).__name__}"
            )
        names = _validate_names(
            "public" if schema is None else schema, "txs_" if table_prefix is None else table_prefix
        )
        store_timeout = settings.commit_timeout  # None: the store's default
        url = dsn

        async def factory() -> Store[Any]:
            return await PostgresStore.open(
                url,
                min_size=1,
                max_size=2,
                schema=names[0],
                table_prefix=names[1],
                commit_timeout=store_timeout,
            )

        super().__init__(session_id, store_factory=factory, **common)


class PostgresStore(Store["PostgresSession"]):
    """PostgreSQL shared by many sessions through one asyncpg pool.

    ``store = await PostgresStore.open(dsn)`` creates and owns a pool (closed by
    :meth:`close`); ``await PostgresStore.from_pool(pool)`` borrows the caller's pool,
    which :meth:`close` leaves open. Then ``store.session(session_id)``.
    """

    backend_class = PostgresBackend
    session_class = PostgresSession
    postgres = BackendView(PostgresBackend)

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        schema: str = "public",
        table_prefix: str = "txs_",
        statement_cache_size: int | None = None,
        command_timeout: float | None = 60.0,
        retry: RetryPolicy | None = None,
        create: bool = True,
        commit_timeout: float | None = None,
        ttl: timedelta | None = None,
        integrity: Integrity | None = None,
        options: StoreOptions | None = None,
        **connect_kwargs: Any,
    ) -> PostgresStore:
        """Create a pool on ``dsn``, set up the schema, and return a store owning the pool.

        ``create=False`` creates nothing: a schema without our tables raises
        :class:`~sessions.errors.StorageError` (for tools that only read).

        ``statement_cache_size=0`` disables named prepared statements (needed behind
        PgBouncer in transaction pooling mode before 1.21). ``command_timeout`` bounds
        each statement (seconds); ``commit_timeout`` bounds how long a commit may hold its
        caller. ``ttl``: the store's default idle time-to-live (see
        :meth:`~sessions.Store.purge`). ``integrity``: what commits do with history the
        Responses API would refuse (``docs/history.md``). ``None``: a setting's default;
        the four may come as ``options=StoreOptions(...)``. Other keyword arguments go
        to ``asyncpg.create_pool``.
        """
        if not isinstance(dsn, str) or not dsn:
            raise TypeError(f"dsn must be a non-empty str, got a {type(dsn).__name__}")
        _validate_names(schema, table_prefix)
        _validate_pool_size(min_size, max_size)
        settings = merge_options(
            options,
            "PostgresStore.open",
            retry=retry,
            commit_timeout=commit_timeout,
            ttl=ttl,
            integrity=integrity,
        )
        kwargs, skipper = _pool_options(connect_kwargs, statement_cache_size)
        pool = await _create_pool(
            dsn, min_size=min_size, max_size=max_size, command_timeout=command_timeout, **kwargs
        )
        try:
            backend = PostgresBackend(
                pool, schema=schema, table_prefix=table_prefix, owns_pool=True
            )
            backend._reset_skipper = skipper
            await backend.migrate(create=create)
            store = cls.opened(backend, settings, "open")
        except BaseException:
            pool.terminate()
            raise
        return store

    @classmethod
    async def from_pool(
        cls,
        pool: Any,
        *,
        schema: str = "public",
        table_prefix: str = "txs_",
        create: bool = True,
        **keywords: Unpack[StoreKeywords],
    ) -> PostgresStore:
        """A store on an existing ``asyncpg.Pool`` that the caller keeps owning.

        :meth:`close` waits for this store's operations, then leaves the pool open. The
        settings (:class:`~sessions._model.options.StoreKeywords`) are those of :meth:`open`.
        """
        check_keywords(keywords, STORE_KEYWORDS, "PostgresStore.from_pool")
        if not isinstance(pool, asyncpg.Pool):
            raise TypeError(f"pool must be an asyncpg.Pool, got {type(pool).__name__}")
        settings = store_options(keywords, "PostgresStore.from_pool")
        backend = PostgresBackend(pool, schema=schema, table_prefix=table_prefix, owns_pool=False)
        await backend.migrate(create=create)
        return cls.opened(backend, settings, "from_pool")

    @property
    def pool(self) -> Any:
        """The ``asyncpg.Pool`` (owned only if the store was made by :meth:`open`)."""
        return self.postgres.pool

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding this store's tables."""
        return self.postgres.schema

    @property
    def table_prefix(self) -> str:
        """What this store's table names start with (``txs_`` by default)."""
        return self.postgres.table_prefix

    def _describe(self) -> str:
        return f"PostgresStore (schema {self.schema!r}, table prefix {self.table_prefix!r})"

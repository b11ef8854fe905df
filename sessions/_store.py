"""``Store``: one database handle (connection or pool) shared by many sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, TypeVar

from ._backend import AdminBackend, Backend, SessionInfo
from ._core import AsyncResource, BufferedSession, RetryPolicy, shielded, validate_session_id
from .errors import SessionError, StoreClosedError

__all__ = ["Store"]

S = TypeVar("S", bound=BufferedSession)


class Store(AsyncResource, Generic[S]):
    """A backend shared by sessions, so that thousands of sessions use one connection.

    Whoever opens a store closes it: sessions made with :meth:`session` borrow the
    store and never close it.
    """

    session_class: type[S]

    def __init__(self, backend: Backend, *, retry: RetryPolicy | None = None) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"backend does not implement sessions Backend: {backend!r}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        self._backend = backend
        self._retry = retry or RetryPolicy()
        self._closed = False
        self._close_task: asyncio.Future[None] | None = None

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def retry(self) -> RetryPolicy:
        """How sessions of this store retry transient commit failures."""
        return self._retry

    @property
    def closed(self) -> bool:
        return self._closed

    def session(
        self,
        session_id: str,
        *,
        autocommit: bool = False,
        session_settings: Any = None,
    ) -> S:
        """A session on this store. Cheap: no I/O until it is used."""
        self._check_open("session")
        validate_session_id(session_id)
        return self.session_class(
            session_id,
            store=self,
            autocommit=autocommit,
            session_settings=session_settings,
        )

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosedError(f"{operation}() on {type(self).__name__}: the store is closed")

    # ---------------------------------------------------------------- store operations

    def _admin(self, operation: str) -> AdminBackend:
        self._check_open(operation)
        backend = self._backend
        if not isinstance(backend, AdminBackend):
            raise SessionError(
                f"{operation}(): {type(backend).__name__} does not support store operations"
            )
        return backend

    async def list_sessions(
        self, *, limit: int = 100, after: str | None = None
    ) -> list[SessionInfo]:
        """One page of sessions ordered by id: the first ``limit`` after ``after``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        if after is not None:
            validate_session_id(after)
        return await self._admin("list_sessions").list_sessions(limit=limit, after=after)

    async def iter_sessions(self, *, page_size: int = 500) -> AsyncIterator[SessionInfo]:
        """Every session, ordered by id, fetched a page at a time."""
        after: str | None = None
        while True:
            page = await self.list_sessions(limit=page_size, after=after)
            for info in page:
                yield info
            if len(page) < page_size:
                return
            after = page[-1].session_id

    async def session_info(self, session_id: str) -> SessionInfo | None:
        """Metadata (item count, created, updated) of one session, or ``None``."""
        validate_session_id(session_id)
        return await self._admin("session_info").session_info(session_id)

    async def delete_session(self, session_id: str) -> bool:
        """Delete one session's history and metadata; ``False`` if it did not exist."""
        validate_session_id(session_id)
        return await self._admin("delete_session").delete_session(session_id)

    async def purge(
        self, older_than: timedelta, *, dry_run: bool = False, page_size: int = 500
    ) -> list[SessionInfo]:
        """Delete sessions not updated for ``older_than``; return what went (or would go).

        Deletes a page of ``page_size`` sessions at a time, each session in a transaction
        of its own.
        """
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise ValueError(f"older_than must be a non-negative timedelta, got {older_than!r}")
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be a positive int, got {page_size!r}")
        admin = self._admin("purge")
        cutoff = datetime.now(timezone.utc) - older_than
        if dry_run:
            return await admin.stale_sessions(cutoff, limit=2**62)
        gone: list[SessionInfo] = []
        while True:
            page = await admin.stale_sessions(cutoff, limit=page_size)
            for info in page:
                if await admin.delete_session(info.session_id):
                    gone.append(info)
            if len(page) < page_size:
                return gone

    async def prune_batch_records(self, older_than: timedelta = timedelta(days=1)) -> int:
        """Forget the ids of batches committed more than ``older_than`` ago.

        Each commit records its batch id so that a retried commit is never applied
        twice. A record is only needed while a commit of that batch may still be
        retried (seconds, at most minutes); pruning older ones keeps the table small.
        Returns how many records were removed.
        """
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise ValueError(f"older_than must be a non-negative timedelta, got {older_than!r}")
        admin = self._admin("prune_batch_records")
        return await admin.prune_batches(datetime.now(timezone.utc) - older_than)

    async def close(self) -> None:
        """Close the database handle (idempotent; waits for in-flight commits)."""
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.ensure_future(self._backend.close())
        await shielded(self._close_task)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'closed' if self._closed else 'open'}>"

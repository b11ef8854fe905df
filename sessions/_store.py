"""``Store``: one database handle (connection or pool) shared by many sessions."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ._backend import Backend
from ._core import BufferedSession, RetryPolicy, shielded, validate_session_id
from .errors import StoreClosedError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Store"]

S = TypeVar("S", bound=BufferedSession)


class Store(Generic[S]):
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
            store=self,  # type: ignore[call-arg]
            autocommit=autocommit,
            session_settings=session_settings,
        )

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StoreClosedError(f"{operation}() on {type(self).__name__}: the store is closed")

    async def close(self) -> None:
        """Close the database handle (idempotent; waits for in-flight commits)."""
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.ensure_future(self._backend.close())
        await shielded(self._close_task)

    async def __aenter__(self) -> Self:
        self._check_open("__aenter__")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'closed' if self._closed else 'open'}>"

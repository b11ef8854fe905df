"""``StoreBase``: what a :class:`~sessions.Store` is before its operations: the backend
it holds and its settings, commits in flight (``close()`` waits for them), the write
marks, the sessions it makes, its lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast, overload

from .._model.backend import Backend
from .._model.options import (
    SESSION_KEYWORDS,
    STORE_KEYWORDS,
    check_keywords,
    session_options,
    store_options,
)
from .._model.policy import DEFAULT_COMMIT_TIMEOUT, DEFAULT_INTEGRITY, Integrity, RetryPolicy
from .._model.validate import validate_session_id
from ..errors import SessionError, StoreClosedError
from .marks import WriteMarks
from .resource import OPEN, AsyncResource

if TYPE_CHECKING:
    from datetime import timedelta

    from typing_extensions import Unpack

    from .._model.options import SessionKeywords, StoreKeywords, StoreOptions

__all__ = ["BackendView", "StoreBase", "borrowed_store"]

S = TypeVar("S")
B = TypeVar("B", bound=Backend)
T = TypeVar("T")
SB = TypeVar("SB", bound="StoreBase[Any]")


def borrowed_store(store: object, kind: type[T], session: str, owned: Mapping[str, object]) -> T:
    """``store`` as a session of ``session``'s kind borrows it (``store=``): a ``kind``,
    given none of the settings in ``owned`` (their names and values), which the store
    already holds."""
    if not isinstance(store, kind):
        raise TypeError(f"store must be a {kind.__name__}, got {type(store).__name__}")
    given = [name for name, value in owned.items() if value is not None]
    if given:
        names = ", ".join(given[:-1]) + " and " + given[-1] if len(given) > 1 else given[0]
        raise TypeError(
            f"{session}: {names} cannot be combined with store= (the store already holds "
            f"{'them' if len(given) > 1 else 'it'})"
        )
    return store


class BackendView(Generic[B]):
    """A store kind's own name for its backend, typed as that kind:
    ``sqlite = BackendView(SQLiteBackend)`` makes ``store.sqlite`` the
    :class:`~sessions.sqlite.SQLiteBackend` that ``store.backend`` is."""

    __slots__ = ("kind",)

    def __init__(self, kind: type[B]) -> None:
        self.kind = kind

    @overload
    def __get__(self, store: None, owner: type[Any]) -> BackendView[B]: ...
    @overload
    def __get__(self, store: StoreBase[Any], owner: type[Any]) -> B: ...
    def __get__(self, store: StoreBase[Any] | None, owner: type[Any]) -> BackendView[B] | B:
        if store is None:
            return self
        return cast(B, store.backend)


class StoreBase(AsyncResource, Generic[S]):
    """The part of :class:`~sessions.Store` every store operation stands on (its
    docstring says what the settings mean)."""

    session_class: Callable[..., S]
    #: The backend class a store kind takes (``None``: any :class:`~sessions._model.backend.Backend`).
    backend_class: ClassVar[type[Backend] | None] = None

    def __init__(self, backend: Backend, **keywords: Unpack[StoreKeywords]) -> None:
        name = type(self).__name__
        check_keywords(keywords, STORE_KEYWORDS, f"{name}.__init__")
        kind = self.backend_class
        if kind is not None and not isinstance(backend, kind):
            raise TypeError(f"backend must be a {kind.__name__}, got {type(backend).__name__}")
        if not isinstance(backend, Backend):
            raise TypeError(f"backend does not implement sessions Backend: {backend!r}")
        settings = store_options(keywords, name)
        self._ttl = settings.ttl
        self._backend = backend
        self._retry = settings.retry or RetryPolicy()
        self._commit_timeout = (
            DEFAULT_COMMIT_TIMEOUT if settings.commit_timeout is None else settings.commit_timeout
        )
        self._integrity = DEFAULT_INTEGRITY if settings.integrity is None else settings.integrity
        self._in_flight = 0
        self._drained: asyncio.Event | None = None
        self.write_marks = WriteMarks()
        """The writes of each session through this store (:mod:`sessions._engine.marks`)."""

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def retry(self) -> RetryPolicy:
        """How sessions of this store retry transient commit failures."""
        return self._retry

    @property
    def ttl(self) -> timedelta | None:
        """The store's default idle time-to-live (``None``: sessions without a TTL of
        their own never expire)."""
        return self._ttl

    @property
    def commit_timeout(self) -> float:
        """Seconds a commit, an autocommit write or ``close()`` may hold its caller."""
        return self._commit_timeout

    @property
    def integrity(self) -> Integrity:
        """What commits of this store's sessions do with history the API would refuse:
        ``"reject"``, ``"quarantine"`` or ``"off"`` (sessions may override it)."""
        return self._integrity

    @classmethod
    def opened(cls: type[SB], backend: Backend, settings: StoreOptions, operation: str) -> SB:
        """A store over ``backend`` that ``operation`` (``"open"``, ...) has just opened,
        bound to the running event loop."""
        store = cls(backend, options=settings)
        store.check_usable(operation)
        return store

    def check_usable(self, operation: str) -> None:
        """Refuse use once closing, or from an event loop other than the store's."""
        self._check_open(operation)
        self._check_loop(operation)

    def usable_here(self) -> bool:
        """Open and bound to the running event loop (what :meth:`check_usable` checks,
        without building its error message: commits ask this first)."""
        return self._lifecycle is OPEN and self._loop is asyncio.get_running_loop()

    def enter_commit(self, operation: str) -> Backend:
        """One commit begins that ``close()`` waits for (retries included): the
        backend to apply it with. Refused once the store is closing. The caller calls
        :meth:`leave_commit` when it ends, in a ``finally`` (a pair of calls rather than
        a context manager: every commit runs them)."""
        if not self.usable_here():
            self.check_usable(operation)
        self._in_flight += 1
        return self._backend

    def leave_commit(self) -> None:
        """The commit :meth:`enter_commit` began has ended."""
        self._in_flight -= 1
        if not self._in_flight and self._drained is not None:
            self._drained.set()

    def session(self, session_id: str, **keywords: Unpack[SessionKeywords]) -> S:
        """A session on this store. Cheap: no I/O until it is used.

        Takes ``autocommit``, ``session_settings``, ``commit_timeout`` and ``integrity``
        (:class:`~sessions._model.options.SessionKeywords`); ``commit_timeout=None`` and
        ``integrity=None`` take the store's; both may also come as
        ``options=StoreOptions(...)`` (which may set nothing else)."""
        check_keywords(keywords, SESSION_KEYWORDS, "Store.session")
        self._check_open("session")
        validate_session_id(session_id)
        settings = session_options(keywords, "session()")
        make = getattr(self, "session_class", None)
        if make is None:
            raise SessionError(f"{self._describe()} has no session_class to make sessions with")
        extra: dict[str, Any] = {}
        if settings.integrity is not None:  # a session_class of before issue 14 need not take it
            extra["integrity"] = settings.integrity
        return make(  # type: ignore[no-any-return]
            session_id,
            store=self,
            autocommit=keywords.get("autocommit", False),
            session_settings=keywords.get("session_settings"),
            commit_timeout=settings.commit_timeout,
            **extra,
        )

    def _describe(self) -> str:
        return type(self).__name__

    def _closed_error(self, operation: str) -> StoreClosedError:
        return StoreClosedError(
            f"{operation}() on {self._describe()}: the store is {self.state.value}"
        )

    def _close_timeout(self) -> float:
        return self._commit_timeout

    async def _aclose(self) -> None:
        """Wait for the commits in flight (none can start now), then close the backend."""
        if self._in_flight:
            self._drained = asyncio.Event()
            await self._drained.wait()
        await self._backend.close()

    def __repr__(self) -> str:
        return f"<{self._describe()} {self.state.value}>"

"""The state every part of :class:`~sessions.BufferedSession` shares: construction,
settings and properties, the lifecycle, the bounded shield, store access, the
``transaction()`` context marks and the refusal of late writes.
"""

from __future__ import annotations

import contextvars
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..._model.backend import Backend
from ..._model.options import SESSION_KEYWORDS, check_keywords, session_options
from ..._model.policy import DEFAULT_COMMIT_TIMEOUT, DEFAULT_INTEGRITY, Integrity
from ..._model.staging import PendingChanges, Staging
from ..._model.validate import validate_bool, validate_limit, validate_session_id
from ...errors import (
    CommitError,
    SessionClosedError,
    SessionError,
    StoreClosedError,
    UncommittedChangesWarning,
)
from ..commit import interrupted_error
from ..locks import CrossLoopLock
from ..marks import Held
from ..owned import OwnedStores
from ..resource import OPEN, AsyncResource
from ..sdk import coerce_session_settings, default_session_settings
from ..shield import DeadlineExceeded, drive

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..._model.options import SessionKeywords
    from ..store import Store

__all__ = ["ACTIVE_TX", "SessionCore", "Tx"]

logger = logging.getLogger("sessions")

T = TypeVar("T")


class Tx:
    """Marks the context of one ``transaction()`` block (inherited by tasks made in it)."""

    __slots__ = ("finished", "owner")

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.finished = False


ACTIVE_TX: contextvars.ContextVar[tuple[Tx, ...]] = contextvars.ContextVar(
    "sessions_transactions", default=()
)


class SessionCore(AsyncResource):
    """The state of a session and what every feature of it uses: construction, the
    properties, the lifecycle (``close()``), the bounded shield, the store of the running
    event loop, settling commits of unknown outcome."""

    def __init__(
        self,
        session_id: str,
        *,
        store: Store[Any] | None = None,
        store_factory: Callable[[], Awaitable[Store[Any]]] | None = None,
        single_loop: str | None = None,
        **keywords: Unpack[SessionKeywords],
    ) -> None:
        check_keywords(keywords, SESSION_KEYWORDS, "SessionCore.__init__")
        self.session_id: str = validate_session_id(session_id)
        settings = session_options(keywords, type(self).__name__)
        self._integrity = settings.integrity
        if (store is None) == (store_factory is None):
            raise TypeError("pass exactly one of store= or store_factory=")
        if single_loop is not None and store_factory is None:
            raise TypeError("single_loop= goes with store_factory= only")
        self._autocommit = validate_bool(keywords.get("autocommit", False), "autocommit")
        # None: the default, SessionSettings(), made on first use (importing the SDK
        # costs a second or more; a CLI that never touches it should not pay that).
        self._settings: Any = _settings(keywords.get("session_settings"))
        self._commit_timeout = settings.commit_timeout
        self._store = store
        self._owned: OwnedStores | None = None
        if store_factory is not None:
            self._owned = OwnedStores(
                store_factory,
                describe=self._describe,
                single_loop=single_loop,
                close_timeout=self.commit_timeout,
            )
        self._staging = Staging()
        self._lock = CrossLoopLock()
        self._token = object()
        self._version: int | None = None
        # The life of the session this object read (Batch.incarnation): its commits are
        # refused once that life is over; rollback() forgets it.
        self._life: str | None = None
        # What the history rules read of the end of the stored history as this session's
        # last commit left it (_integrity.tail_after), and the store's write mark that
        # commit ended with (sessions._engine.marks): valid while the session's mark is that one.
        self._known: tuple[Held, tuple[Any, ...]] | None = None

    # ------------------------------------------------------------------ introspection

    @property
    def session_settings(self) -> Any:
        """The agents ``SessionSettings`` (``SessionSettings()`` unless given; ``None`` on
        SDK releases before 0.8.0, which have no such class). Assign a ``SessionSettings``,
        a dict of its fields, or ``None`` for the default."""
        if self._settings is None:
            self._settings = default_session_settings()
        return self._settings

    @session_settings.setter
    def session_settings(self, value: Any) -> None:
        self._settings = _settings(value)

    @property
    def autocommit(self) -> bool:
        """Whether every write is its own commit."""
        return self._autocommit

    @property
    def commit_timeout(self) -> float:
        """Seconds ``commit()``, an autocommit write or ``close()`` may hold its caller."""
        own = self._commit_timeout  # every commit reads it: no helper call
        if own is not None:
            return own
        store = self.store
        return DEFAULT_COMMIT_TIMEOUT if store is None else store.commit_timeout

    @property
    def integrity(self) -> Integrity:
        """What ``commit()`` does with history the API would refuse (the session's
        ``integrity=``, else its store's)."""
        own = self._integrity  # every commit reads it: no helper call
        if own is not None:
            return own
        store = self.store
        return DEFAULT_INTEGRITY if store is None else store.integrity

    @property
    def pending(self) -> PendingChanges:
        """What ``commit()`` would apply now (a snapshot; read-only)."""
        return self._staging.pending()

    @property
    def has_pending(self) -> bool:
        """``True`` when there is anything staged that ``commit()`` would apply."""
        return bool(self._staging)

    @property
    def version(self) -> int | None:
        """The session's stored version as this session last saw it: set by a read of
        stored history (``get_items()``) and by ``commit(expected_version=...)``;
        ``None`` before that, after a commit without ``expected_version`` (other writers
        may have committed in between: read again), or where the backend keeps no
        versions. While a clear is staged, reads do not read stored history, so it stays
        the version last read: ``commit(expected_version=session.version)`` applies the
        clear unless another writer committed since. See :meth:`commit`."""
        return self._version

    @property
    def store(self) -> Store[Any] | None:
        """The store this session writes to from the running event loop (``None`` until
        an owned one is opened there)."""
        if self._store is not None or self._owned is None:
            return self._store
        return self._owned.current()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.session_id!r} {self.state.value}"
            f"{' autocommit' if self._autocommit else ''} pending={self.pending.items}>"
        )

    # ------------------------------------------------------------------ lifecycle

    def _describe(self) -> str:
        return f"session {self.session_id!r}"

    def _closed_error(self, operation: str) -> SessionClosedError:
        return SessionClosedError(
            f"{operation}() on session {self.session_id!r}: the session is {self.state.value}"
        )

    def _check_open(self, operation: str) -> None:
        # Every call of the session runs this: the lifecycle read as attributes, in one frame.
        if self._lifecycle is not OPEN:
            raise self._closed_error(operation)
        store = self._store
        if store is not None and store._lifecycle is not OPEN:
            raise StoreClosedError(
                f"{operation}() on session {self.session_id!r}: its store is {store.state.value}"
            )

    def _close_timeout(self) -> float:
        return self.commit_timeout

    async def _aclose(self) -> None:
        """Staged changes are neither written nor silently dropped: a
        :class:`~sessions.errors.UncommittedChangesWarning` and a log line name the
        session and what was discarded. Closes the store only if this session opened it.
        """
        self._warn_discarded("close()")
        self._staging.discard()
        if self._owned is not None:
            await self._owned.close_all()

    def __del__(self) -> None:
        try:
            if not self.closed and self.has_pending:
                self._warn_discarded("garbage collection", stacklevel=3)
        except AttributeError:  # __init__ failed halfway
            pass

    # ------------------------------------------------------------------ internals

    async def _shield(self, work: Callable[[], Awaitable[T]], *, known: bool | None = None) -> T:
        """Run ``work`` in the bounded shield; a missed deadline becomes a CommitError.

        ``known``: whether the outcome of an interrupted ``work`` is known (default: from
        staging, i.e. whether a staged batch is in flight or in doubt).
        """
        try:
            return await drive(work(), self.commit_timeout)  # shielded(), one frame fewer
        except DeadlineExceeded as exc:
            raise self._missed(exc, known) from exc

    def _missed(self, exc: DeadlineExceeded, known: bool | None = None) -> CommitError:
        """The error for shielded work that missed its deadline (:meth:`_shield`)."""
        store = self.store
        backend = None if store is None else store.backend
        if known is None:
            known = not self._staging.in_doubt()
        return interrupted_error(self.session_id, backend, exc, known=known)

    def _warn_discarded(self, why: str, stacklevel: int = 3) -> None:
        pending = self.pending
        if not pending:
            return
        message = (
            f"session {self.session_id!r} discarded by {why} with uncommitted changes "
            f"({pending.items} staged item(s), {pending.pops} staged pop(s), "
            f"clear={pending.clear}); call commit() or rollback() first"
        )
        logger.warning(message)
        warnings.warn(message, UncommittedChangesWarning, stacklevel=stacklevel)

    def _discard(self, why: str) -> None:
        if self._staging.discard():
            logger.warning(
                "session %r: %s discarded a batch whose earlier commit has an unknown "
                "outcome; it may already be stored",
                self.session_id,
                why,
            )

    def _refuse_late_write(self, operation: str, count: int) -> bool:
        for tx in ACTIVE_TX.get():
            if tx.owner is self._token and tx.finished:
                logger.warning(
                    "session %r: refused %s() of %d item(s) issued from a transaction() "
                    "block that has already ended (a task it started is still writing); "
                    "nothing was staged",
                    self.session_id,
                    operation,
                    count,
                )
                return True
        return False

    async def _ready_store(self, operation: str) -> Store[Any]:
        """The store (this loop's, opened on first use, if owned); checked for use here."""
        store = self._store
        if store is None:
            assert self._owned is not None
            store = await self._owned.get(operation)
        if not store.usable_here():
            store.check_usable(f"{operation}() on session {self.session_id!r}")
        return store

    async def _backend(self, operation: str) -> Backend:
        return (await self._ready_store(operation)).backend

    async def _settle(self, operation: str) -> None:
        """With the lock held: ask the database about batches of unknown outcome.

        Does I/O only after a commit failed with an unknown outcome.
        """
        unresolved = self._staging.unresolved()
        if unresolved:
            backend = await self._backend(operation)
            self._staging.resolve(await backend.applied(self.session_id, unresolved))

    def _refuse_staged(self, operation: str) -> None:
        if self._staging:
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: it has staged changes; "
                "commit() or rollback() first"
            )


def _settings(value: object) -> Any:
    """Given settings, coerced and checked (``None``: the default, made on first use)."""
    if value is None:
        return None
    settings = coerce_session_settings(value)
    validate_limit(settings.limit, "session_settings.limit")
    return settings

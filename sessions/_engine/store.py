"""``Store``: one database handle (connection or pool) shared by many sessions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, TypeVar

from .._model.backend import (
    AdminBackend,
    CatalogueBackend,
    QuarantineEntry,
    SessionFilter,
    SessionInfo,
    TurnBackend,
    TurnUsage,
)
from .._model.catalogue import session_filter, validate_user_id
from .._model.policy import (
    RECORD_MARGIN,
    kept_prefixes,
    min_record_age,
)
from .._model.validate import (
    validate_duration,
    validate_positive_int,
    validate_session_id,
)
from ..errors import SessionError
from .storebase import StoreBase

if TYPE_CHECKING:
    pass

__all__ = ["Store"]

S = TypeVar("S")


#: Purge deletes at most this many sessions in one transaction ...
PURGE_SESSIONS = 100
#: ... and starts a new transaction before a session would take it past this many items
#: (a larger session is deleted in a transaction of its own).
PURGE_ITEMS = 20_000


def _chunks(page: list[SessionInfo]) -> list[list[SessionInfo]]:
    """``page`` cut into purge transactions (see :data:`PURGE_SESSIONS`)."""
    chunks: list[list[SessionInfo]] = []
    items = 0
    for info in page:
        size = max(0, info.item_count)
        if not chunks or len(chunks[-1]) >= PURGE_SESSIONS or items + size > PURGE_ITEMS:
            chunks.append([])
            items = 0
        chunks[-1].append(info)
        items += size
    return chunks


async def _purge_pages(
    page: Callable[[str | None], Awaitable[list[SessionInfo]]],
    delete: Callable[[list[str]], Awaitable[list[str]]],
    dry_run: bool,
    page_size: int,
) -> list[SessionInfo]:
    """Walk the listing a page at a time; delete each page's sessions (those that still
    qualify when ``delete`` locks them), a chunk per transaction; what went."""
    gone: list[SessionInfo] = []
    after: str | None = None
    while True:
        listed = await page(after)
        if dry_run:
            gone.extend(listed)
        else:
            for chunk in _chunks(listed):
                deleted = set(await delete([info.session_id for info in chunk]))
                gone.extend(info for info in chunk if info.session_id in deleted)
        if len(listed) < page_size:
            return gone
        after = listed[-1].session_id


class Store(StoreBase[S]):
    """A backend shared by sessions, so that thousands of sessions use one connection.

    Whoever opens a store closes it: sessions made with :meth:`session` borrow the
    store and never close it. A store belongs to the event loop it was opened on.

    ``commit_timeout`` (seconds, default 30) bounds how long a commit, an autocommit
    write or ``close()`` may hold its caller; sessions may set their own.

    ``integrity`` (``"quarantine"`` by default, ``"reject"`` or ``"off"``): what a
    commit of its sessions does with history the Responses API would refuse (see
    ``docs/history.md``); sessions may set their own.

    ``ttl`` (a ``timedelta``, default ``None``: none) is the store's default idle
    time-to-live: :meth:`purge` without ``older_than`` deletes sessions not updated for
    their own TTL (``set_info(ttl=...)``) or, without one, this one.

    ``retry`` (a :class:`~sessions.RetryPolicy`, default ``RetryPolicy()``): how commits
    retry transient failures. ``None`` for any of the four takes its default; they may
    also come as ``options=StoreOptions(...)`` (a setting given both ways is a
    ``TypeError``).

    ``session_class`` makes the sessions of :meth:`session`; it is called as
    ``session_class(session_id, store=store, autocommit=..., session_settings=...,
    commit_timeout=...)``, plus ``integrity=...`` when one is given
    (:class:`~sessions.BufferedSession` and its subclasses take exactly that).
    """

    # ---------------------------------------------------------------- store operations

    def _admin(self, operation: str) -> AdminBackend:
        self.check_usable(operation)
        backend = self._backend
        if not isinstance(backend, AdminBackend):
            raise SessionError(
                f"{operation}(): {type(backend).__name__} does not support store operations"
            )
        return backend

    def _catalogue(self, operation: str) -> CatalogueBackend:
        backend = self._admin(operation)
        if not isinstance(backend, CatalogueBackend):
            raise SessionError(
                f"{operation}(): {type(backend).__name__} keeps no session catalogue"
            )
        return backend

    async def list_sessions(
        self,
        *,
        limit: int = 100,
        after: str | None = None,
        user_id: str | None = None,
        tag: str | None = None,
        updated_after: datetime | None = None,
    ) -> list[SessionInfo]:
        """One page of sessions ordered by id: the first ``limit`` after ``after``.

        ``user_id``, ``tag`` and ``updated_after`` (``updated_at`` strictly later; a
        naive datetime is UTC) keep only the sessions matching all of those given.
        """
        validate_positive_int(limit, "limit")
        if after is not None:
            validate_session_id(after, "after")
        where = session_filter(user_id, tag, updated_after)
        if where == SessionFilter():
            return await self._admin("list_sessions").list_sessions(limit=limit, after=after)
        return await self._catalogue("list_sessions").find_sessions(where, limit=limit, after=after)

    async def count_sessions(
        self,
        *,
        user_id: str | None = None,
        tag: str | None = None,
        updated_after: datetime | None = None,
    ) -> int:
        """How many sessions :meth:`list_sessions` with these filters would list in all."""
        where = session_filter(user_id, tag, updated_after)
        return await self._catalogue("count_sessions").count_sessions(where)

    async def delete_user(self, user_id: str) -> list[str]:
        """Erase every session of ``user_id`` (items, batch records, run states, catalogue
        entries: every per-session row) in one transaction; the ids of those deleted.

        A commit racing with it either lands before (and is erased) or after it. After
        it, a session object that had read one of these sessions is refused with
        :class:`~sessions.errors.SessionDeletedError` (nothing applied) until its
        ``rollback()``; only a writer that never read the session makes a new one
        (without a user unless it sets one). See ``docs/catalogue.md``.
        """
        validate_user_id(user_id)
        try:
            return await self._catalogue("delete_user").delete_user(user_id)
        finally:
            self.write_marks.forget()

    async def iter_sessions(self, *, page_size: int = 500) -> AsyncIterator[SessionInfo]:
        """Every session, ordered by id, fetched a page at a time."""
        validate_positive_int(page_size, "page_size")
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

    async def usage(self, *, since: datetime | None = None) -> TurnUsage:
        """The model usage recorded with every session's turns (``record_usage``),
        summed; only turns committed at or after ``since`` (a naive time is UTC) when
        given. Deleted and cleared sessions' turns are gone, rewound ones count."""
        if since is not None:
            if not isinstance(since, datetime):
                raise TypeError(f"since must be a datetime or None, got {type(since).__name__}")
            if since.tzinfo is None:
                since = since.replace(tzinfo=timezone.utc)
        self.check_usable("usage")
        backend = self._backend
        if not isinstance(backend, TurnBackend):
            raise SessionError(f"usage(): {type(backend).__name__} does not record turns")
        total, _ = await backend.usage_totals(None, since)
        return total

    async def delete_session(self, session_id: str, *, keep_forks: bool = False) -> bool:
        """Delete one session's history, quarantine and metadata; ``False`` if it did
        not exist. Its own fork record goes with it; the records of the sessions forked
        from it (:meth:`~sessions.BufferedSession.branches`) too, unless ``keep_forks``
        (what ``import_sessions(mode="replace")`` does: the forks still exist)."""
        validate_session_id(session_id)
        if not isinstance(keep_forks, bool):
            raise TypeError(f"keep_forks must be a bool, got {type(keep_forks).__name__}")
        try:
            admin = self._admin("delete_session")
            return await admin.delete_session(session_id, keep_forks=keep_forks)
        finally:
            self.write_marks.forget(session_id)

    async def read_quarantine(self, session_id: str) -> list[QuarantineEntry]:
        """The items kept out of a session's history (``integrity="quarantine"``,
        ``sessions doctor --repair``), oldest first."""
        validate_session_id(session_id)
        return await self._admin("read_quarantine").read_quarantine(session_id)

    async def purge(
        self,
        older_than: timedelta | None = None,
        *,
        dry_run: bool = False,
        page_size: int = 500,
    ) -> list[SessionInfo]:
        """Delete sessions not updated for ``older_than``; return what went (or would go).

        Without ``older_than``: delete the expired sessions, those not updated for
        their own TTL (``set_info(ttl=...)``) or, if they have none, the store's
        :attr:`ttl` (sessions with neither are kept).

        Lists stale sessions a page of ``page_size`` at a time (also with ``dry_run``)
        and deletes them in transactions of up to :data:`PURGE_SESSIONS` sessions and
        about :data:`PURGE_ITEMS` items, each of which checks again, with the sessions'
        rows locked, that every one is still stale: a session written to after it was
        listed is kept.

        ``older_than``: a ``timedelta`` from 0 to 100 years
        (:data:`sessions._model.validate.MAX_DURATION`); anything else is a ``TypeError`` or
        ``ValueError`` naming it.
        """
        if older_than is not None:
            validate_duration(older_than, "older_than")
        validate_positive_int(page_size, "page_size")
        try:
            if older_than is None:
                return await self._purge_expired(dry_run, page_size)
            return await self._purge_stale(older_than, dry_run, page_size)
        finally:
            if not dry_run:
                self.write_marks.forget()

    async def _purge_stale(
        self, older_than: timedelta, dry_run: bool, page_size: int
    ) -> list[SessionInfo]:
        admin = self._admin("purge")
        cutoff = datetime.now(timezone.utc) - older_than

        async def page(after: str | None) -> list[SessionInfo]:
            return await admin.stale_sessions(cutoff, limit=page_size, after=after)

        async def delete(ids: list[str]) -> list[str]:
            return await admin.delete_stale(ids, cutoff)

        return await _purge_pages(page, delete, dry_run, page_size)

    async def _purge_expired(self, dry_run: bool, page_size: int) -> list[SessionInfo]:
        catalogue = self._catalogue("purge")
        now = datetime.now(timezone.utc)
        default = None if self._ttl is None else self._ttl.total_seconds()

        async def page(after: str | None) -> list[SessionInfo]:
            return await catalogue.expired_sessions(now, default, limit=page_size, after=after)

        async def delete(ids: list[str]) -> list[str]:
            return await catalogue.delete_expired(ids, now, default)

        return await _purge_pages(page, delete, dry_run, page_size)

    async def prune_batch_records(self, older_than: timedelta = timedelta(days=1)) -> int:
        """Forget the ids of session commits made more than ``older_than`` ago.

        Each commit records its batch id so that a retried commit is never applied
        twice; a record is needed only while that batch may still be sent again. So
        ``older_than`` may not be shorter than the longest a commit of this store can
        keep retrying (:attr:`min_batch_record_age`: the retry policy's waits plus
        ``commit_timeout`` plus a margin); a shorter one raises ``ValueError`` naming
        both. A commit that failed with ``outcome_known=False`` and is committed again
        by hand later than ``older_than`` could be applied twice: retry those promptly.
        The records of import and migration are kept, however old: they are what makes
        running an import or a migration again add nothing. Returns how many went.
        ``older_than`` is at most 100 years, like every duration.
        """
        validate_duration(older_than, "older_than")
        minimum = self.min_batch_record_age
        if older_than.total_seconds() < minimum:
            raise ValueError(
                f"prune_batch_records(older_than={older_than.total_seconds():g}s) would "
                "forget batches that may still be retried: older_than must be at least "
                f"{minimum:g}s (this store's retry window {self._retry.window():g}s + "
                f"commit_timeout {self._commit_timeout:g}s + {RECORD_MARGIN:g}s margin)"
            )
        admin = self._admin("prune_batch_records")
        cutoff = datetime.now(timezone.utc) - older_than
        return await admin.prune_batches(cutoff, keep_prefixes=kept_prefixes())

    @property
    def min_batch_record_age(self) -> float:
        """Seconds: the shortest ``older_than`` :meth:`prune_batch_records` accepts."""
        return min_record_age(self._retry, self._commit_timeout)

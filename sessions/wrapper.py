"""``TransactionalSession``: staging, read-your-writes and a shielded commit for ANY session.

It wraps an object that follows the Agents SDK ``Session`` protocol (``session_id``,
``get_items(limit)``, ``add_items(items)``, ``pop_item()``, ``clear_session()``) - the
SDK's ``SQLiteSession``, ``RedisSession``, ``SQLAlchemySession``, one of ours, your own -
and gives it the API of every session of this package, by reusing the core: it *is* a
:class:`~sessions.BufferedSession` whose backend is an adapter over the wrapped session.

What the wrapper guarantees by itself and what is only as strong as the wrapped session
(atomicity, idempotency, contiguity across writers) is spelled out in ``docs/wrapper.md``.
The short version: nothing reaches the wrapped session before ``commit()``; a commit is
never torn by a cancellation of its caller; but a commit is as many calls on the wrapped
session as there are operations in it, so a *failure* of the wrapped session in the
middle of a commit can leave part of it applied (the error then says so).

The wrapper never closes the wrapped session: the caller owns it.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._backend import Batch, Row
from ._policy import DEFAULT_COMMIT_TIMEOUT, RetryPolicy
from ._serde import decode_item, encode_item
from ._session import BufferedSession
from ._store import Store
from .errors import ConflictError, InvalidItemError, SessionError, StorageError

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings

__all__ = ["InnerSession", "InnerSessionWriteError", "TransactionalSession"]

_REQUIRED_METHODS = ("get_items", "add_items", "pop_item", "clear_session")

# Stands in for a stored item that cannot be carried as a JSON object: the core's
# decoder skips (and logs) it like a corrupt row, so it never hides its neighbours.
_UNREADABLE = "\x00unreadable"

# Row keys are ``generation * _SPAN - n`` for the n-th newest item (n >= 1).
_SPAN = 1 << 40


class InnerSession(Protocol):
    """What :class:`TransactionalSession` needs from the session it wraps."""

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[Any]: ...

    async def add_items(self, items: list[Any]) -> None: ...

    async def pop_item(self) -> Any: ...

    async def clear_session(self) -> None: ...


class InnerSessionWriteError(RuntimeError):
    """The wrapped session failed in the middle of a commit.

    Part of the commit may already be stored in the wrapped session (``done`` lists
    what returned successfully; the call that raised may itself have applied part of
    its work). The core reports this as a :class:`~sessions.errors.CommitError` with
    ``outcome_known=False`` and keeps the changes staged. Unlike with this package's own
    backends, committing again is NOT guaranteed to be exactly-once here: the wrapped
    session cannot tell what it applied. Inspect ``wrapper.inner.get_items()`` and call
    ``rollback()`` if the changes are already there.
    """

    def __init__(self, message: str, *, done: tuple[str, ...]) -> None:
        super().__init__(message)
        self.done = done


async def _call(fn: Any, *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def _check_inner(inner: object) -> None:
    missing = [name for name in _REQUIRED_METHODS if not callable(getattr(inner, name, None))]
    if not hasattr(inner, "session_id"):
        missing.insert(0, "session_id")
    if missing:
        raise TypeError(
            f"TransactionalSession wraps an object following the Agents SDK Session "
            f"protocol; {type(inner).__name__} lacks {', '.join(missing)}"
        )


class _InnerBackend:
    """The :class:`~sessions.Backend` protocol over one wrapped session.

    Keys of loaded rows count from the newest item backwards (``-1`` is the newest,
    ``-2`` the one before, offset by the generation below), so a staged pop - always of the newest stored items not yet popped - is applied with the
    wrapped session's ``pop_item()``. Before popping, the items about to go are read
    again and compared with what was read when the pops were staged: if another writer
    changed the tail meanwhile, the commit fails with a conflict and nothing is applied.

    Keys also carry a generation, bumped whenever this adapter may have changed the
    wrapped session: pops staged before a commit that failed halfway refer to positions
    that may have moved, so they are refused (conflict) instead of popping the wrong
    items.
    """

    atomic = False
    idempotent = False

    def __init__(self, inner: InnerSession, session_id: str) -> None:
        self._inner = inner
        self._session_id = session_id
        # key -> JSON text, from the loads since the last commit (for the pop check)
        self._seen: dict[int, str] = {}
        self._generation = 0
        # batches this adapter has seen applied in full but the core has not yet dropped
        self._done: set[str] = set()

    def _check(self, session_id: str) -> None:
        if session_id != self._session_id:
            raise SessionError(
                f"this wrapper's backend serves session {self._session_id!r} only, "
                f"not {session_id!r}"
            )

    async def _read(self, limit: int | None) -> list[Any]:
        try:
            items = await _call(self._inner.get_items, limit)
        except Exception as exc:  # noqa: BLE001 - reported as a StorageError naming it
            raise StorageError(
                f"get_items({limit!r}) of the wrapped {type(self._inner).__name__} "
                f"{self._session_id!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(items, (str, bytes, dict)) or not isinstance(items, Sequence):
            raise StorageError(
                f"get_items() of the wrapped {type(self._inner).__name__} returned a "
                f"{type(items).__name__}, not a list of items"
            )
        out = list(items)
        if limit is not None and len(out) > limit:
            out = out[len(out) - limit :]
        return out

    async def load(self, session_id: str, limit: int | None) -> list[Row]:
        self._check(session_id)
        if limit == 0:
            return []
        items = await self._read(limit)
        n = len(items)
        base = self._generation * _SPAN
        rows: list[Row] = []
        for i, item in enumerate(items):
            try:
                text = encode_item(item, i)
            except InvalidItemError:
                text = _UNREADABLE
            rows.append((base + i - n, text))
        self._seen.update(rows)
        return rows

    async def _check_pops(self, pops: tuple[int, ...]) -> None:
        k = len(pops)
        base = self._generation * _SPAN
        if any(not base - _SPAN < key < base for key in pops):
            raise ConflictError(
                f"session {self._session_id!r}: the staged pops were read before an "
                "earlier commit failed halfway and may have changed the wrapped session; "
                "rollback() and read again"
            )
        wanted = [base - i for i in range(k, 0, -1)]
        if sorted(pops) != wanted:
            raise StorageError(
                f"session {self._session_id!r}: the staged pops are not the {k} newest "
                "items of the wrapped session, and pop_item() can only remove the newest "
                "(an unreadable item at the end of the history causes this)"
            )
        current = await self._read(k)
        expected = [self._seen.get(key) for key in wanted]
        if len(current) != k or any(
            text is None or text == _UNREADABLE or decode_item(text) != item
            for text, item in zip(expected, current, strict=False)
        ):
            raise ConflictError(
                f"session {self._session_id!r}: the {k} newest item(s) of the wrapped "
                f"{type(self._inner).__name__} changed since they were read (another "
                "writer?); nothing was popped"
            )

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        self._check(session_id)
        inner = self._inner
        done: list[str] = []  # what returned, for the error message
        # True once anything of this call may be in the wrapped session: from then on a
        # failure has an unknown outcome (the core then asks applied() what to drop).
        touched = any(batch.batch_id in self._done for batch in batches)
        try:
            for batch in batches:
                if batch.batch_id in self._done:
                    continue
                if batch.clear:
                    touched = True
                    await _call(inner.clear_session)
                    done.append("clear_session()")
                elif batch.pops:
                    await self._check_pops(batch.pops)
                    touched = True
                    for n in range(1, len(batch.pops) + 1):
                        if await _call(inner.pop_item) is None:
                            raise ConflictError(
                                f"pop_item() {n} of {len(batch.pops)} found the wrapped "
                                "session empty (another writer?)"
                            )
                        done.append("pop_item()")
                if batch.items:
                    touched = True
                    await _call(inner.add_items, [decode_item(text) for text in batch.items])
                    done.append(f"add_items({len(batch.items)} item(s))")
                self._done.add(batch.batch_id)
        except BaseException as exc:
            if touched:
                self._changed()
            if not touched and isinstance(exc, StorageError):
                raise  # nothing reached the wrapped session
            if not touched and isinstance(exc, Exception):
                raise StorageError(
                    f"the wrapped {type(inner).__name__} failed before anything was "
                    f"written: {type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(exc, Exception):
                raise  # CancelledError & co: the core records an unknown outcome
            raise InnerSessionWriteError(
                f"the wrapped {type(inner).__name__} {session_id!r} failed during commit "
                f"with {type(exc).__name__}: {exc}; already done: "
                f"{', '.join(done) or 'nothing that returned'}. It cannot tell what it "
                "applied, so committing again may repeat part of it: check "
                ".inner.get_items() and rollback() if the changes are there",
                done=tuple(done),
            ) from exc
        self._changed()
        self._done.clear()  # the core drops every batch it passed us

    def _changed(self) -> None:
        """The wrapped session may have changed: earlier reads no longer locate items."""
        self._generation += 1
        self._seen.clear()

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        """The batches this adapter saw applied in full (in this process only)."""
        self._check(session_id)
        return {batch_id for batch_id in batch_ids if batch_id in self._done}

    async def close(self) -> None:
        """Nothing to release: the wrapped session belongs to the caller."""


class _InnerStore(Store["TransactionalSession"]):
    """The private, single-session store under one :class:`TransactionalSession`."""

    def __init__(self, backend: _InnerBackend, commit_timeout: float) -> None:
        # Nothing the wrapped session raises is known to be safe to repeat: no retries.
        super().__init__(backend, retry=RetryPolicy(attempts=1), commit_timeout=commit_timeout)

    def _describe(self) -> str:
        return "the store of a TransactionalSession"

    def session(
        self,
        session_id: str,
        *,
        autocommit: bool = False,
        session_settings: Any = None,
        commit_timeout: float | None = None,
    ) -> TransactionalSession:
        raise SessionError(
            "a TransactionalSession's store serves that one session; wrap another "
            "session object in a TransactionalSession of its own"
        )


class TransactionalSession(BufferedSession):
    """Buffer any Agents SDK session: stage writes in memory, apply them at ``commit()``.

    ``TransactionalSession(inner)`` takes ``session_id`` from ``inner`` and, unless
    ``session_settings`` is given, its ``session_settings`` too. Reads see the wrapped
    session's history followed by the staged changes; ``add_items`` never suspends
    (unless ``autocommit``); ``commit()`` applies the staged ``clear_session()``, pops
    and ``add_items()`` to ``inner`` in order, shielded from cancellation of its caller
    for at most ``commit_timeout`` seconds.

    ``close()`` closes the wrapper only, never ``inner``: the caller owns it.
    """

    def __init__(
        self,
        inner: InnerSession,
        *,
        autocommit: bool = False,
        session_settings: SessionSettings | None = None,
        commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
    ) -> None:
        _check_inner(inner)
        session_id = inner.session_id
        if session_settings is None:
            session_settings = getattr(inner, "session_settings", None)
        self._inner = inner
        super().__init__(
            session_id,
            store=_InnerStore(_InnerBackend(inner, session_id), commit_timeout),
            autocommit=autocommit,
            session_settings=session_settings,
        )

    @property
    def inner(self) -> InnerSession:
        """The wrapped session (never closed by this wrapper)."""
        return self._inner

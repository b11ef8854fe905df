"""The wrapper's adapter: the :class:`~sessions.Backend` protocol over any Agents SDK session.

:class:`InnerBackend` turns a load into the wrapped session's ``get_items()`` and a staged
batch into its ``clear_session()``, ``pop_item()`` and ``add_items()`` (or the SDK's
one-step replacement hooks, where it has them). Neither atomic nor idempotent;
:class:`~sessions.wrapper.TransactionalSession` is built on it, and ``docs/wrapper.md``
says what that guarantees and what it does not.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._engine.sdk import atomic_replace_hook, call_session_method, snapshot_hook
from ._model.backend import Batch, Row
from ._model.serde import decode_item, encode_item
from .errors import ConflictError, InvalidItemError, SessionError, StorageError

__all__ = ["READ_CONTEXT", "InnerBackend", "InnerSession", "InnerSessionWriteError"]

# Stands in for a stored item that cannot be carried as a JSON object: the core's
# decoder skips (and logs) it like a corrupt row, so it never hides its neighbours.
_UNREADABLE = "\x00unreadable"

# Row keys are ``generation * _SPAN - n`` for the n-th newest item (n >= 1).
_SPAN = 1 << 40

# "Every item" as an explicit limit, for wrapped sessions whose limit=None means "their
# session_settings.limit" (the SDK's sessions).
_ALL = 2_147_483_647

# The run context of the get_items() call being served (a read is not staged).
READ_CONTEXT: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "sessions_wrapper_read_context", default=None
)


class InnerSession(Protocol):
    """What :class:`~sessions.wrapper.TransactionalSession` needs from the session it wraps."""

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


def _plain(item: Any) -> Any:
    """``item`` as the JSON value it is stored as (what a read of it gives)."""
    try:
        return decode_item(encode_item(item))
    except InvalidItemError:
        return item


def _own_limit(inner: object) -> Any:
    """The wrapped session's default ``limit`` (``None``: it returns everything)."""
    return getattr(getattr(inner, "session_settings", None), "limit", None)


@dataclass
class _Progress:
    """What one ``apply`` call has done to the wrapped session so far."""

    touched: bool
    """Anything of the call may be in the wrapped session: a failure's outcome is unknown."""
    done: list[str] = field(default_factory=list)
    """The calls that returned, for the error message."""


class InnerBackend:
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
        #: The run context of the latest write staged with one (handed on with writes).
        self.context: Any = None

    def _check(self, session_id: str) -> None:
        if session_id != self._session_id:
            raise SessionError(
                f"this wrapper's backend serves session {self._session_id!r} only, "
                f"not {session_id!r}"
            )

    def _call(self, method: Any, *args: Any, context: Any = None) -> Any:
        """``method(*args)`` on the wrapped session, with the run context if it takes one."""
        return call_session_method(
            method, *args, context=self.context if context is None else context
        )

    async def _read(self, limit: int | None) -> list[Any]:
        ask = _ALL if limit is None and _own_limit(self._inner) is not None else limit
        try:
            items = await self._call(self._inner.get_items, ask, context=READ_CONTEXT.get())
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

    def _wanted(self, pops: tuple[int, ...]) -> list[int]:
        """The keys of the ``len(pops)`` newest items, which ``pops`` must be."""
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
        return wanted

    def _compare(self, wanted: list[int], current: list[Any]) -> None:
        """Conflict unless ``current`` (the newest items now) is what was read as ``wanted``."""
        expected = [self._seen.get(key) for key in wanted]
        if len(current) != len(wanted) or any(
            text is None or text == _UNREADABLE or decode_item(text) != item
            for text, item in zip(expected, current, strict=False)
        ):
            raise ConflictError(
                f"session {self._session_id!r}: the {len(wanted)} newest item(s) of the "
                f"wrapped {type(self._inner).__name__} changed since they were read "
                "(another writer?); nothing was popped"
            )

    def _check_tail(self, batch: Batch) -> None:
        """Every item read after ``batch.tail`` must be popped by the batch."""
        assert batch.tail is not None
        base = self._generation * _SPAN
        newer = base - 1 - batch.tail
        if not base - _SPAN < batch.tail < base or newer > len(batch.pops):
            newer = -1
        popped = set(batch.pops)
        if newer < 0 or any(key not in popped for key in range(batch.tail + 1, base)):
            raise ConflictError(
                f"session {self._session_id!r}: the end of the wrapped session's history "
                "changed since the replacement was prepared"
            )

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        self._check(session_id)
        # touched: once anything of this call may be in the wrapped session, a failure
        # has an unknown outcome (the core then asks applied() what to drop).
        progress = _Progress(touched=any(batch.batch_id in self._done for batch in batches))
        try:
            for batch in batches:
                if batch.batch_id not in self._done:
                    await self._apply_one(batch, progress)
                    self._done.add(batch.batch_id)
        except BaseException as exc:
            if progress.touched:
                self.changed()
            error = self._failure(exc, progress)
            if error is exc:
                raise
            raise error from exc
        self.changed()
        self._done.clear()  # the core drops every batch it passed us

    async def _apply_one(self, batch: Batch, progress: _Progress) -> None:
        inner = self._inner
        if batch.run_state is not None:
            raise StorageError("a TransactionalSession cannot store run states")
        if batch.quarantine:
            raise StorageError("a TransactionalSession cannot keep quarantined items")
        if batch.tail is not None:
            self._check_tail(batch)
        if batch.clear:
            if batch.items and await self._replace_all(batch, progress):
                return
            progress.touched = True
            await self._call(inner.clear_session)
            progress.done.append("clear_session()")
        elif batch.pops:
            if await self._replace_tail(batch, progress):
                return  # the items went with the pops, in one step
            await self._pop_newest(batch.pops, progress)
        if batch.items:
            progress.touched = True
            await self._call(inner.add_items, [decode_item(text) for text in batch.items])
            progress.done.append(f"add_items({len(batch.items)} item(s))")

    async def _pop_newest(self, pops: tuple[int, ...], progress: _Progress) -> None:
        """``pop_item()`` once per staged pop, after checking the items are still there.

        Another writer may still pop or append between the check and a ``pop_item()``: each
        popped item is compared with the one expected, and a different one is an error
        (the wrapped session then needs looking at), never a silent wrong pop.
        """
        wanted = self._wanted(pops)
        self._compare(wanted, await self._read(len(wanted)))
        progress.touched = True
        for n, key in enumerate(reversed(wanted), start=1):
            popped = await self._call(self._inner.pop_item)
            if popped is None:
                raise ConflictError(
                    f"pop_item() {n} of {len(wanted)} found the wrapped session empty "
                    "(another writer?)"
                )
            progress.done.append("pop_item()")
            expected = self._seen.get(key)
            if expected is None or decode_item(expected) != _plain(popped):
                raise StorageError(
                    f"pop_item() {n} of {len(wanted)} removed another item than the one "
                    f"read (another writer changed the wrapped {type(self._inner).__name__} "
                    "in between)"
                )

    async def _replace_tail(self, batch: Batch, progress: _Progress) -> bool:
        """Pops and items in one step, through the wrapped session's own snapshot hook.

        ``False`` when it has none or declines (then pops and adds are separate calls).
        """
        hook = snapshot_hook(self._inner)
        if hook is None:
            return False
        wanted = self._wanted(batch.pops)
        snapshot = await hook(len(wanted))
        if snapshot is None:
            return False
        current = list(snapshot.items)
        self._compare(wanted, current[max(0, len(current) - len(wanted)) :])
        items = [decode_item(text) for text in batch.items]
        await self._replace(snapshot, len(current) - len(wanted), items, progress)
        progress.done.append(
            f"replace the newest {len(wanted)} item(s) with {len(items)} (one step)"
        )
        return True

    async def _replace_all(self, batch: Batch, progress: _Progress) -> bool:
        """Clear and add in one step, through the wrapped session's own hooks."""
        inner = self._inner
        items = [decode_item(text) for text in batch.items]
        atomic = atomic_replace_hook(inner)
        if atomic is not None:
            try:
                replaced = await atomic(inner, items)
            except BaseException:
                progress.touched = True
                raise
            if replaced:
                progress.touched = True
                progress.done.append(f"replace the history with {len(items)} item(s) (one step)")
                return True
        hook = snapshot_hook(inner)
        snapshot = None if hook is None else await hook(_ALL)
        if snapshot is None or not snapshot.complete or not snapshot.items:
            return False
        await self._replace(snapshot, 0, items, progress)
        progress.done.append(f"replace the history with {len(items)} item(s) (one step)")
        return True

    async def _replace(
        self, snapshot: Any, start: int, items: list[Any], progress: _Progress
    ) -> None:
        try:
            replaced = await snapshot.replace_suffix(start, items)
        except BaseException:
            progress.touched = True
            raise
        if not replaced:
            raise ConflictError(
                f"session {self._session_id!r}: the wrapped {type(self._inner).__name__} "
                "changed while the replacement was being applied; nothing was replaced"
            )
        progress.touched = True

    def _failure(self, exc: BaseException, progress: _Progress) -> BaseException:
        """What ``apply`` raises for ``exc`` (``exc`` itself to re-raise it as is)."""
        inner = self._inner
        if not progress.touched and isinstance(exc, StorageError):
            return exc  # nothing reached the wrapped session
        if not progress.touched and isinstance(exc, Exception):
            return StorageError(
                f"the wrapped {type(inner).__name__} failed before anything was "
                f"written: {type(exc).__name__}: {exc}"
            )
        if not isinstance(exc, Exception):
            return exc  # CancelledError & co: the core records an unknown outcome
        return InnerSessionWriteError(
            f"the wrapped {type(inner).__name__} {self._session_id!r} failed during commit "
            f"with {type(exc).__name__}: {exc}; already done: "
            f"{', '.join(progress.done) or 'nothing that returned'}. It cannot tell what it "
            "applied, so committing again may repeat part of it: check "
            ".inner.get_items() and rollback() if the changes are there",
            done=tuple(progress.done),
        )

    def changed(self) -> None:
        """The wrapped session may have changed: earlier reads no longer locate items."""
        self._generation += 1
        self._seen.clear()

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> set[str]:
        """The batches this adapter saw applied in full (in this process only)."""
        self._check(session_id)
        return {batch_id for batch_id in batch_ids if batch_id in self._done}

    async def close(self) -> None:
        """Nothing to release: the wrapped session belongs to the caller."""

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

Where the wrapped session offers the SDK's own one-step replacement hooks (see
:mod:`sessions._engine.sdk`; the SDK's ``SQLiteSession`` does from openai-agents 0.23), a commit
that pops and adds, or clears and adds, is applied through them: one step, atomic.

The run context the SDK passes (``wrapper=``) is handed on to a wrapped session whose
methods take it: with a read at once, with the writes when they are applied.

The wrapper never closes the wrapped session: the caller owns it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._adapter import READ_CONTEXT, InnerBackend, InnerSession, InnerSessionWriteError
from ._engine.sdk import atomic_replace_hook, call_session_method, snapshot_hook
from ._engine.session import BufferedSession
from ._engine.store import Store
from ._model.options import session_keywords
from ._model.policy import Integrity, RetryPolicy
from .errors import CommitError, SessionError

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._model.options import SessionKeywords

__all__ = ["InnerSession", "InnerSessionWriteError", "TransactionalSession"]

_REQUIRED_METHODS = ("get_items", "add_items", "pop_item", "clear_session")


def _check_inner(inner: object) -> None:
    missing = [name for name in _REQUIRED_METHODS if not callable(getattr(inner, name, None))]
    if not hasattr(inner, "session_id"):
        missing.insert(0, "session_id")
    if missing:
        raise TypeError(
            f"TransactionalSession wraps an object following the Agents SDK Session "
            f"protocol; {type(inner).__name__} lacks {', '.join(missing)}"
        )


class _InnerStore(Store["TransactionalSession"]):
    """The private, single-session store under one :class:`TransactionalSession`."""

    def __init__(self, backend: InnerBackend, commit_timeout: float | None) -> None:
        # Nothing the wrapped session raises is known to be safe to repeat: no retries.
        super().__init__(backend, retry=RetryPolicy(attempts=1), commit_timeout=commit_timeout)

    def _describe(self) -> str:
        return "the store of a TransactionalSession"

    def check_usable(self, operation: str) -> None:
        """Refuse use once closing. No event-loop binding: the adapter holds nothing of a
        loop, so the wrapper may be shared by threads with loops of their own exactly as
        far as the wrapped session may (the SDK's ``SQLiteSession`` may)."""
        self._check_open(operation)

    def usable_here(self) -> bool:
        return not self.closed

    def session(self, *args: Any, **kwargs: Any) -> TransactionalSession:
        """Refused, whatever the arguments: this store serves its one session only."""
        raise SessionError(
            "a TransactionalSession's store serves that one session; wrap another "
            "session object in a TransactionalSession of its own"
        )


class TransactionalSession(BufferedSession):
    """Buffer any Agents SDK session: stage writes in memory, apply them at ``commit()``.

    ``TransactionalSession(inner)`` takes ``session_id`` from ``inner`` and, unless
    ``session_settings`` is given, a copy of its ``session_settings`` too
    (``SessionSettings()`` if it has none). Reads see the wrapped session's history
    followed by the staged changes; ``add_items`` never suspends (unless ``autocommit``);
    ``commit()`` applies the staged ``clear_session()``, pops and ``add_items()`` to
    ``inner`` in order, shielded from cancellation of its caller for at most
    ``commit_timeout`` seconds.

    The run context (``wrapper=``) given to a read is handed on to ``inner.get_items``;
    the one given to the latest write is handed on to every call a commit makes on
    ``inner`` (when its methods take one). Run states (``stage_run_state``) cannot be
    stored: ``inner`` has no place for them.

    ``integrity`` (``"reject"`` by default, or ``"off"``): what ``commit()`` does with
    history the Responses API would refuse (``docs/history.md``). ``"quarantine"`` is
    refused: ``inner`` has no place to keep quarantined items. Both settings may also
    come as ``options=StoreOptions(...)``; ``None`` takes the default (30 s, ``"reject"``).

    ``close()`` closes the wrapper only, never ``inner``: the caller owns it.
    """

    def __init__(
        self,
        inner: InnerSession,
        **keywords: Unpack[SessionKeywords],
    ) -> None:
        settings, _ = session_keywords(keywords, "TransactionalSession")
        integrity: Integrity = "reject" if settings.integrity is None else settings.integrity
        if integrity == "quarantine":
            raise ValueError(
                "TransactionalSession(integrity='quarantine'): the wrapped session has no "
                "place to keep quarantined items; use 'reject' (the default) or 'off', or a "
                "SQLiteSession / PostgresSession"
            )
        _check_inner(inner)
        session_id = inner.session_id
        session_settings = keywords.get("session_settings")
        if session_settings is None:
            session_settings = _copy_settings(getattr(inner, "session_settings", None))
        self._inner = inner
        self._adapter = InnerBackend(inner, session_id)
        super().__init__(
            session_id,
            store=_InnerStore(self._adapter, settings.commit_timeout),
            autocommit=keywords.get("autocommit", False),
            session_settings=session_settings,
            integrity=integrity,
        )

    @property
    def inner(self) -> InnerSession:
        """The wrapped session (never closed by this wrapper)."""
        return self._inner

    # ------------------------------------------------------------------ run context

    async def get_items(
        self, limit: int | None = None, *, turns: int | None = None, wrapper: Any = None
    ) -> list[Any]:
        token = READ_CONTEXT.set(wrapper)
        try:
            return await super().get_items(limit, turns=turns, wrapper=wrapper)
        finally:
            READ_CONTEXT.reset(token)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        self._remember_context(wrapper)
        await super().add_items(items, wrapper=wrapper)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        """Buffered: staged like any pop. Autocommit: ``inner.pop_item()`` itself, which
        reads and removes the newest item in one step (as atomic as ``inner`` makes it)."""
        self._remember_context(wrapper)
        if self.autocommit:
            self._check_open("pop_item")
            if self._refuse_late_write("pop_item", 1):
                return None
            return await self._shield(self._pop_inner, known=False)
        token = READ_CONTEXT.set(wrapper)
        try:
            return await super().pop_item(wrapper=wrapper)
        finally:
            READ_CONTEXT.reset(token)

    async def _pop_inner(self) -> Any:
        async with self._lock:
            await self._settle("pop_item")
            await self._commit_locked()  # leftovers of a failed autocommit write first
            try:
                return await call_session_method(
                    self._inner.pop_item, context=self._adapter.context
                )
            except Exception as exc:
                raise CommitError(
                    f"pop_item() of the wrapped {type(self._inner).__name__} "
                    f"{self.session_id!r} failed with {type(exc).__name__}: {exc}; whether it "
                    "removed an item is unknown",
                    session_id=self.session_id,
                    outcome_known=False,
                ) from exc
            finally:
                self._adapter.changed()

    async def clear_session(self, *, wrapper: Any = None) -> None:
        self._remember_context(wrapper)
        await super().clear_session(wrapper=wrapper)

    def _remember_context(self, wrapper: Any) -> None:
        if wrapper is not None:
            self._adapter.context = wrapper

    async def rollback(self) -> None:
        await super().rollback()
        if not self.has_pending:
            self._adapter.context = None

    async def _aclose(self) -> None:
        await super()._aclose()
        self._adapter.context = None

    # ------------------------------------------------------------------ what inner can do

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The SDK's compaction hook (see :class:`BufferedSession`); none with
        ``prune_prefix``, whose removal of the oldest items ``inner``'s ``pop_item()``
        cannot express (the SDK then uses its generic path). Defined here, so offered
        despite this class's overrides of the four ``Session`` methods, as
        :meth:`_atomic_replace_items` is."""
        if prune_prefix is not None:
            return None
        return await super()._get_compaction_snapshot(limit)

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """The SDK's whole-history hook (see :class:`BufferedSession`), defined here so
        that it is offered: this class's own overrides of the four ``Session`` methods
        only keep the run context, which a replacement does not carry (a subclass
        that overrides them again is not offered it)."""
        return await super()._atomic_replace_items(items)

    def _replacements_supported(self, *, suffix: bool) -> bool:
        """Buffered: a replacement is staged like any change. Autocommit: only when
        ``inner`` can apply it in one step (else the SDK's own fallback runs)."""
        if not self.autocommit:
            return True
        if snapshot_hook(self._inner) is not None:
            return True
        return not suffix and atomic_replace_hook(self._inner) is not None

    def _stage_run_state_text(
        self, text: str | None, operation: str, label: str | None = None
    ) -> None:
        raise self._no_run_states(operation)

    async def _run_state_backend(self, operation: str) -> Any:
        raise self._no_run_states(operation)

    def _no_run_states(self, operation: str) -> SessionError:
        return SessionError(
            f"{operation}() on a TransactionalSession: the wrapped "
            f"{type(self._inner).__name__} has no place to store a run state with its "
            "history; use a SQLiteSession or PostgresSession (or keep the state yourself, "
            "written only after commit())"
        )


def _copy_settings(settings: Any) -> Any:
    """A copy of the wrapped session's settings (changing one must not change the other)."""
    if settings is None or isinstance(settings, dict):
        return settings
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        return dataclasses.replace(settings)
    return settings

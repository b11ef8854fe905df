"""The Agents SDK's compaction hooks on :class:`~sessions.BufferedSession`
(``docs/sdk-flows.md``): a snapshot of the latest items whose end can be replaced, and
the replacement of the whole history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._model.backend import Batch, TurnRecord, new_batch_id
from ..._model.history import Shape
from ..._model.serde import encode_staged
from ..._model.validate import validate_limit
from ...errors import CommitConflictError
from ..commit import apply_batches
from ..compaction import Ident, plan_replacement, read_window
from ..integrity import judge
from ..sdk import make_compaction_snapshot
from .protocol import ProtocolPart

__all__ = ["CompactionPart"]

#: A suffix replacement to plan: the expected end, the prune rule, the new items.
_Suffix = tuple[list[Ident], "Callable[[Any], bool] | None", list[str], list[Shape]]


class CompactionPart(ProtocolPart):
    """The SDK's compaction hooks. Built on :class:`ProtocolPart` on purpose: a hook is
    offered only where the class defining it derives from every class defining one of
    the four ``Session`` methods (:func:`_offers_hook`)."""

    # The hooks replace history without calling get_items / add_items / pop_item /
    # clear_session. A subclass that overrides one of those (to redact, encrypt, index or
    # refuse what is stored) would be bypassed, so the hooks are offered only where the
    # class that defines them is at least as derived as every class that defines one of
    # those four (_offers_hook): our own classes, and subclasses that override none of
    # the four. Otherwise they answer None / False and the SDK falls back to its generic
    # path, which calls the overrides, as it does for subclasses of its own sessions
    # ("must supply their own snapshot operation rather than inherit a bypass"). A
    # subclass opts back in by overriding the hook itself (calling ours through super()
    # and applying its own transforms to what the hook stores).

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """The Agents SDK's compaction hook (openai-agents 0.23+; see ``sessions._engine.sdk``).

        The latest ``limit`` items (stored, then staged) and a ``replace_suffix(start,
        output)`` that replaces ``items[start:]`` with ``output`` if they are still
        exactly the end of the history (``False`` and nothing changed otherwise). With
        autocommit the replacement is one commit of its own; otherwise it is staged
        with the open transaction (later reads see it; ``rollback()`` drops it).
        ``prune_prefix`` also removes the oldest stored items it accepts.

        ``None`` (the SDK then uses its generic path) on a subclass that overrides
        ``get_items``, ``add_items``, ``pop_item`` or ``clear_session`` without
        overriding this hook too (see ``docs/sdk-flows.md``).
        """
        self._check_open("get_items")
        n = validate_limit(limit, "limit")
        if not _offers_hook(type(self), "_get_compaction_snapshot"):
            return None
        if not n or make_compaction_snapshot([], True, _never) is None:
            return None
        if not self._replacements_supported(suffix=True):
            return None
        async with self._lock:
            await self._settle("get_items")
            if self._autocommit:
                await self._commit_locked()  # leftovers of a failed autocommit write
            window = await read_window(
                await self._backend("get_items"), self.session_id, self._staging, n
            )
        if window is None:
            return None
        idents = window.idents

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            return await self._replace_suffix(idents[start:], output, prune_prefix)

        return make_compaction_snapshot(window.items, window.complete, replace_suffix)

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """The Agents SDK's whole-history replacement hook (openai-agents 0.24+).

        Replaces every item with ``items``: one commit of its own with autocommit,
        staged with the open transaction otherwise. ``False`` (nothing changed; the SDK
        then clears and adds through ``clear_session`` and ``add_items``) on a subclass
        that overrides one of the four ``Session`` methods without overriding this hook
        too, as for :meth:`_get_compaction_snapshot`.
        """
        self._check_open("clear_session")
        if not _offers_hook(type(self), "_atomic_replace_items"):
            return False
        texts, shapes = encode_staged(items)
        if not self._replacements_supported(suffix=False):
            return False
        if self._autocommit:
            batch = Batch(
                new_batch_id(),
                True,
                (),
                tuple(texts),
                turn=TurnRecord(self._staging.run_id),
                shapes=tuple(shapes),
            )
            return await self._shield(lambda: self._replace_now(batch), known=False)
        async with self._lock:
            await self._settle("clear_session")
            self._staging.clear()
            self._staging.add(texts, shapes)
        return True

    def _replacements_supported(self, *, suffix: bool) -> bool:
        """Whether a replacement commits atomically here (overridden by the wrapper)."""
        return True

    async def _replace_suffix(
        self, expected: list[Ident], output: list[Any], prune: Callable[[Any], bool] | None
    ) -> bool:
        self._check_open("add_items")
        texts, shapes = encode_staged(output)
        if not expected:
            return False
        if self._autocommit:
            return await self._shield(
                lambda: self._replace_now((expected, prune, texts, shapes)), known=False
            )
        async with self._lock:
            await self._settle("add_items")
            plan = await plan_replacement(
                await self._backend("add_items"), self.session_id, self._staging, expected, prune
            )
            if plan is None:
                return False
            self._staging.replace_tail(plan.keep, plan.pops, plan.tail, texts, shapes)
            return True

    async def _replace_now(self, replacement: Batch | _Suffix) -> bool:
        """Autocommit: commit a replacement now, as a batch of its own.

        A suffix replacement is planned first, from the end of the history it expects
        (``False`` if that end changed). Leftovers of failed autocommit writes are
        committed before it. ``False`` when the database refuses it as a conflict
        (nothing applied).
        """
        async with self._commit_lock("commit"):
            await self._settle("commit")
            await self._commit_locked()
            store = await self._ready_store("commit")
            batch = replacement
            if not isinstance(batch, Batch):
                expected, prune, texts, shapes = batch
                plan = await plan_replacement(
                    store.backend, self.session_id, self._staging, expected, prune
                )
                if plan is None or plan.keep:
                    return False
                batch = Batch(
                    new_batch_id(),
                    False,
                    tuple(plan.pops),
                    tuple(texts),
                    tail=plan.tail,
                    turn=TurnRecord(self._staging.run_id),
                    shapes=tuple(shapes),
                )
            (batch,) = await judge(store.backend, self.session_id, [batch], self.integrity)
            outcome = await apply_batches(store, self.session_id, [batch])
        if outcome.error is None:
            return True
        if isinstance(outcome.error, CommitConflictError):
            return False
        raise outcome.error


async def _never(start: int, output: list[Any]) -> bool:
    return False


#: The ``Session`` methods whose overrides the compaction hooks would bypass.
_SESSION_METHODS = ("get_items", "add_items", "pop_item", "clear_session")


def _defined_by(cls: type, name: str) -> type:
    """The class of ``cls.__mro__`` whose own namespace defines ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return object


def _offers_hook(cls: type, hook: str) -> bool:
    """Whether sessions of ``cls`` offer the SDK's compaction ``hook``: only when the class
    defining it is (a subclass of) every class defining one of :data:`_SESSION_METHODS`,
    so that no override of theirs is bypassed."""
    owner = _defined_by(cls, hook)
    return all(issubclass(owner, _defined_by(cls, name)) for name in _SESSION_METHODS)

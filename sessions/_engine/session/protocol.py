"""The Agents SDK ``Session`` protocol of :class:`~sessions.BufferedSession`:
``get_items``, ``add_items``, ``pop_item``, ``clear_session``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..._model.serde import decode_item, encode_staged
from ..._model.turns import span_of
from ..._model.validate import validate_limit
from ...errors import CommitConflictError
from .core import ACTIVE_TX
from .plumbing import SessionPlumbing

__all__ = ["ProtocolPart"]


class ProtocolPart(SessionPlumbing):
    """The four ``Session`` methods: reads of stored history plus staging, staged writes
    (each its own commit with autocommit)."""

    # ``wrapper`` is the run context the Agents SDK passes (0.20+) to sessions whose four
    # methods accept it. The storage of this package does not depend on it;
    # TransactionalSession hands it on to the session it wraps.

    async def get_items(
        self, limit: int | None = None, *, turns: int | None = None, wrapper: Any = None
    ) -> list[Any]:
        """Stored history followed by the staged changes; the latest ``limit`` items.

        ``limit`` defaults to ``session_settings.limit``. A limited read never starts
        with a tool output whose call fell before it (the API would refuse it): it then
        starts after that output, with fewer items (unless ``integrity="off"``).
        ``turns=N`` instead returns the items of the last ``N`` whole turns (:meth:`turns`;
        staged items count as one pending turn), never part of a turn, but for the same
        rule: an output whose call is in an earlier turn (an approval) is trimmed with what
        precedes it; ``session_settings.limit`` does not apply then, and ``limit`` may not
        be given with it.
        """
        self._check_open("get_items")
        if turns is not None:
            if limit is not None:
                raise TypeError("get_items(): pass limit= or turns=, not both")
            return await self._get_turn_items(validate_limit(turns, "turns"))
        if limit is None and self._settings is not None:
            limit = self._settings.limit
        n = validate_limit(limit)
        if n == 0:
            return []
        async with self._lock:
            await self._settle("get_items")
            return await self._view(n)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Stage ``items`` (validated and snapshotted now).

        Without autocommit this never suspends, so no cancellation can interrupt it
        halfway. A non-JSON item raises :class:`~sessions.errors.InvalidItemError`
        (a ``TypeError``) naming its index and type; none of the call's items are
        staged then.
        """
        self._check_open("add_items")
        encoded, shapes = encode_staged(items)
        late = ACTIVE_TX.get() and self._refuse_late_write("add_items", len(encoded))
        if late or not encoded:
            return
        self._staging.add(encoded, shapes)
        if self._autocommit:
            await self._shield(self._commit_now)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        """Remove and return the newest item (staged ones first), or ``None``.

        Popping stored history is staged as well and applied at commit.
        """
        self._check_open("pop_item")
        if self._refuse_late_write("pop_item", 1):
            return None
        if self._autocommit:
            return await self._shield(self._autocommit_pop)
        async with self._lock:
            await self._settle("pop_item")
            value, _ = await self._stage_pop()
            return value

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Stage the removal of the whole history (applied at commit).

        The saved run state (``stage_run_state()``) is not history and stays.
        """
        self._check_open("clear_session")
        if self._refuse_late_write("clear_session", 1):
            return
        if self._autocommit:
            await self._shield(self._autocommit_clear)
            return
        async with self._lock:
            await self._settle("clear_session")
            self._staging.clear()

    async def _get_turn_items(self, count: int | None) -> list[Any]:
        assert count is not None
        if count == 0:
            return []
        async with self._lock:
            await self._settle("get_items")
            chosen, total = await self._newest_turns("get_items", count)
            _, pops, staged = self._staging.view()
            values: list[Any] = []
            span = span_of(chosen)
            if span is not None:
                values = await self._read_span(*span, pops)
            if chosen and chosen[-1].pending:
                values.extend(decode_item(text) for text in staged)
            # A call answered in a later turn (an approval: the call is committed with
            # the paused run, its output with the resumed one) may fall before the
            # window: the rule of limited reads trims the orphan output.
            return values if len(chosen) == total else self._whole(values)

    async def _autocommit_pop(self) -> Any:
        policy = (await self._ready_store("pop_item")).retry
        attempts = policy.attempts
        for attempt in range(1, attempts + 1):
            async with self._commit_lock("pop_item"):
                await self._settle("pop_item")
                value, key = await self._stage_pop()
                try:
                    await self._commit_locked()
                except CommitConflictError:
                    # Another writer removed that item first: forget our pop (an autocommit
                    # session must not keep a change that can never apply), read again.
                    if key is not None:
                        self._staging.forget_pop(key)
                    if key is None or attempt == attempts:
                        raise
                else:
                    return value
            await asyncio.sleep(policy.delay(attempt))  # let the other writer finish
        raise AssertionError("unreachable")  # pragma: no cover

    async def _autocommit_clear(self) -> None:
        async with self._commit_lock("clear_session"):
            await self._settle("clear_session")
            self._staging.clear()
            await self._commit_locked()

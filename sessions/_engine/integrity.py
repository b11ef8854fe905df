"""Integrity at commit: the history rules (:mod:`sessions._model.history`) applied to batches.

Once for every backend: :meth:`sessions.BufferedSession.commit` hands its sealed
batches to :func:`judge` before the commit path. What a commit adds is checked in the
context of the stored history it depends on, and only as much of that as it needs:
nothing is read when every output the batches add answers a call they add too (a
whole turn in one transaction), or a call at the end of the history that the session
knows it committed itself (``known``: see :func:`tail_after` and :mod:`sessions._engine.marks`;
an autocommit session's tool output, committed after its call); otherwise the latest
stored items are read, four times more each round, until the calls answered are found
or the history is read whole.

A commit is judged as the SDK resumes a run (``finished=False``): calls at the end
of what it adds with nothing after them but calls, outputs and reasoning are pending
(a cancelled run, a run waiting for an approval), not missing their outputs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .._model.backend import Backend, Batch
from .._model.history import (
    CALL_OUTPUT,
    Defect,
    answered_calls,
    calls_from,
    check_history,
    item_label,
)
from .._model.policy import Integrity
from ..errors import InvalidHistoryError
from .observe import observed_load

__all__ = ["clean", "judge", "tail_after"]

logger = logging.getLogger("sessions")

#: How many stored items a commit reads first when it needs context.
_FIRST_READ = 16
#: How many of the items it committed last a session keeps (:func:`tail_after`).
_KNOWN = 32


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _decode_all(texts: Sequence[str]) -> list[Any]:
    try:  # one decode for the lot
        return list(json.loads(f"[{','.join(texts)}]"))
    except ValueError:
        return [_decode(text) for text in texts]


def _shapes(batch: Batch, last: int | None = None) -> list[Any]:
    """What the rules read of the batch's items (of its ``last`` ones): the shapes taken
    when they were staged (:func:`sessions._model.history.shape_of`), decoded text where
    there is none. Staged texts are JSON objects (``add_items`` checked)."""
    texts: Sequence[str] = batch.items
    shapes = batch.shapes
    if shapes is not None and len(shapes) != len(texts):
        shapes = None
    if last is not None and len(texts) > last:
        texts = texts[-last:]
        shapes = None if shapes is None else shapes[-last:]
    if shapes is None:
        return _decode_all(texts)
    if None not in shapes:
        return list(shapes)
    pairs = zip(shapes, texts, strict=True)
    return [_decode(text) if shape is None else shape for shape, text in pairs]


class _Added:
    """What the rules read of the items the batches add after their last clear (the
    batches from ``start`` on), and the stored rows the batches pop."""

    __slots__ = ("cleared", "items", "pops", "start")

    def __init__(self, batches: Sequence[Batch]) -> None:
        self.start = 0
        self.cleared = False
        self.pops: set[int] = set()
        for index, batch in enumerate(batches):
            if batch.clear:
                self.start, self.cleared = index, True
            if batch.pops:
                self.pops.update(batch.pops)
        if len(batches) == self.start + 1:  # one batch, the usual commit
            self.items = _shapes(batches[self.start])
        else:
            self.items = []
            for index in range(self.start, len(batches)):
                self.items += _shapes(batches[index])

    def owners(self, batches: Sequence[Batch]) -> list[tuple[int, str]]:
        """``(batch index, text)`` of each item, in the order of :attr:`items`."""
        return [
            (index, text)
            for index in range(self.start, len(batches))
            for text in batches[index].items
        ]


def tail_after(known: Sequence[Any] | None, batches: Sequence[Batch]) -> tuple[Any, ...] | None:
    """What the rules read of the last items of the history once ``batches`` are
    applied (at most ``_KNOWN``), given ``known``, the same of the last items before
    them (``None``: not known; then what the batches append, itself the end of the
    history). ``None`` if a batch changes the history otherwise than by appending
    (pops, a rewind)."""
    if len(batches) == 1:  # the usual commit: tuples joined, no list in between
        batch = batches[0]
        own = batch.shapes
        if own is not None and not batch.pops and batch.rewind is None and None not in own:
            if len(own) == len(batch.items):
                joined = own if batch.clear or not known else (*known, *own)
                return joined if len(joined) <= _KNOWN else joined[-_KNOWN:]
    shapes = list(known or ())
    for batch in batches:
        if batch.pops or batch.rewind is not None:
            return None
        if batch.clear:
            shapes = []
        shapes += _shapes(batch, last=_KNOWN)
    return tuple(shapes[-_KNOWN:])


async def _context(
    backend: Backend, session_id: str, added: _Added, known: Sequence[Any] | None
) -> list[Any]:
    """The stored items (oldest first) the added items need: enough of the end of the
    history to hold every call the added outputs answer, ``[]`` if none is needed.
    ``known``: the end of the stored history, if the session knows it."""
    if added.cleared:
        return []
    wanted = answered_calls(added.items)
    if not wanted:
        return []
    if known is not None and not added.pops:
        start = calls_from(known, wanted)
        if start is not None:  # from the earliest of those calls: nothing before matters
            return list(known[start:])
    fetch = _FIRST_READ + len(wanted) + len(added.pops)
    while True:
        rows = await observed_load(backend, session_id, fetch)
        items = _decode_all([text for key, text in rows if key not in added.pops])
        if len(rows) < fetch or calls_from(items, wanted) is not None:
            return items
        fetch *= 4


async def _pop_orphans(backend: Backend, session_id: str, added: _Added) -> list[Defect]:
    """Stored outputs the batches' pops would leave without their call: a call popped
    while its output stays (another writer stored the output after the pop was staged;
    one writer pops the output first, it is newer). Reads the stored items from the
    oldest popped one on; nothing when nothing stored is popped. Not for a backend that
    is not atomic (the wrapper's keys count from the end of the history and its reads
    are what its pops are checked against: a read here would move them)."""
    if added.cleared or not added.pops or not backend.atomic:
        return []
    first = min(added.pops)
    fetch = _FIRST_READ + len(added.pops)
    while True:
        rows = await observed_load(backend, session_id, fetch)
        if len(rows) < fetch or rows[0][0] <= first:
            break
        fetch *= 4
    popped = _decode_all([text for key, text in rows if key >= first and key in added.pops])
    kept = _decode_all([text for key, text in rows if key >= first and key not in added.pops])
    left = sorted(key for key in answered_calls(kept) if calls_from(popped, [key]) is not None)
    return [
        Defect(
            0,
            "orphan_output",
            call_id,
            f"the pop removes {kind} {call_id!r} while its {CALL_OUTPUT[kind]} stays stored",
        )
        for kind, call_id in left
    ]


def _defects(context: list[Any], items: list[Any]) -> list[Defect]:
    base = len(context)
    found = check_history(context + items, finished=False)
    return [replace(d, index=d.index - base) for d in found if d.index >= base]


def _message(session_id: str, defects: Sequence[Defect], items: Sequence[Any]) -> str:
    shown = "; ".join(
        f"item {d.index} ({item_label(items[d.index])}): {d.kind}: {d.message}" for d in defects[:5]
    )
    more = f" (and {len(defects) - 5} more)" if len(defects) > 5 else ""
    return (
        f"session {session_id!r}: the commit would store history the Responses API "
        f"refuses: {shown}{more}. Nothing was applied; the changes are still staged "
        "(pop_item() or rollback() them)"
    )


def clean(batches: Sequence[Batch]) -> bool:
    """Whether :func:`judge` would return ``batches`` as they are without reading
    anything: one batch that pops nothing and whose items, by their shapes, break no
    rule (the usual commit: a whole turn). What a commit asks first, in its own frame:
    no coroutine, nothing built."""
    if len(batches) != 1:
        return False
    batch = batches[0]
    shapes = batch.shapes
    if batch.pops or shapes is None or len(shapes) != len(batch.items) or None in shapes:
        return False
    return not shapes or not check_history(shapes, finished=False)


async def judge(
    backend: Backend,
    session_id: str,
    batches: Sequence[Batch],
    mode: Integrity,
    known: Sequence[Any] | None = None,
) -> list[Batch]:
    """The batches to apply under ``mode``; ``known``: what the rules read of the last
    items of the stored history (:func:`tail_after`), if the session knows them (what
    it committed itself, nothing written since).

    ``"off"``: as given. ``"reject"``: as given if they keep the rules, else
    :class:`~sessions.errors.InvalidHistoryError`. ``"quarantine"``: the offending
    items moved from each batch's ``items`` to its ``quarantine``. In both modes, pops
    that would leave a stored output without its call raise ``InvalidHistoryError``
    (a pop cannot be quarantined).
    """
    if mode == "off":
        return list(batches)
    added = _Added(batches)
    orphans = await _pop_orphans(backend, session_id, added)
    if orphans:  # in both modes: a pop cannot be quarantined
        shown = "; ".join(d.message for d in orphans[:5])
        raise InvalidHistoryError(
            f"session {session_id!r}: the commit's pops would leave stored history the "
            f"Responses API refuses: {shown} (stored by another writer after the pop was "
            "staged). Nothing was applied; the changes are still staged (rollback() and "
            "read again)",
            session_id=session_id,
            defects=tuple(orphans),
        )
    if not added.items:
        return list(batches)
    context: list[Any] = []
    defects = check_history(added.items, finished=False)
    if not defects:
        return list(batches)
    if any(defect.kind == "orphan_output" for defect in defects):
        # Its call may be stored: judge again with as much of the history as it needs.
        context = await _context(backend, session_id, added, known)
        defects = _defects(context, added.items)
    if not defects:
        return list(batches)
    if mode == "reject":
        raise InvalidHistoryError(
            _message(session_id, defects, added.items),
            session_id=session_id,
            defects=tuple(defects),
        )
    return _quarantined(session_id, batches, added, context, defects)


def _quarantined(
    session_id: str,
    batches: Sequence[Batch],
    added: _Added,
    context: list[Any],
    defects: list[Defect],
) -> list[Batch]:
    """Take offending items out until what is left keeps the rules."""
    reasons: dict[int, str] = {}
    kept = list(range(len(added.items)))
    while defects:
        for defect in defects:
            position = kept[defect.index]
            reasons.setdefault(position, f"{defect.kind}: {defect.message}")
        out = {kept[d.index] for d in defects}
        kept = [position for position in kept if position not in out]
        defects = _defects(context, [added.items[position] for position in kept])
    owners = added.owners(batches)
    result: list[Batch] = []
    for index, batch in enumerate(batches):
        mine = [p for p, (owner, _) in enumerate(owners) if owner == index]
        if not mine:
            result.append(batch)
            continue
        moved = tuple((reasons[p], owners[p][1]) for p in mine if p in reasons)
        items = tuple(owners[p][1] for p in mine if p not in reasons)
        shapes = tuple(added.items[p] for p in mine if p not in reasons)
        result.append(
            replace(batch, items=items, quarantine=batch.quarantine + moved, shapes=shapes)
        )
    logger.warning(
        "session %r: %d item(s) kept out of the history and quarantined (integrity="
        "'quarantine'): %s",
        session_id,
        len(reasons),
        "; ".join(reasons[p] for p in sorted(reasons)),
    )
    return result

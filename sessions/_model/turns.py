"""Turns: the items each commit added, as the session's history reads them. No I/O.

A backend stores one turn record per applied batch with items (:class:`~sessions.Batch`
``turn``): the keys of its first and last item, its time and run id. Here the records
meet the keys of the items actually stored, and the staged changes:

* an item popped (stored or staged) leaves its turn, and a turn left without items is
  gone; a clear removes every turn;
* stored items that no record covers (history written before turn records existed,
  by ``sessions import`` or migration, or by a backend version without them) form one
  turn per uninterrupted run of such items: a store from before schema version 4 reads
  as one turn;
* staged items are one pending turn after the stored ones.

That is :func:`build_turns`, over every record and every stored key (the full path).
Backends also keep, with every write, how many items each record holds and, per
session, how many records hold items and how many items those hold; when those cover
every stored item (the index is *exact*), the turns are exactly the visible records
holding items, so the oldest or newest few are read without the item keys
(:class:`~sessions._model.backend.TurnWindow`, :func:`window_turns`).

Turns are numbered from 1 in history order, as they read now: numbers are positions,
so they close up when a turn is removed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from .backend import TurnRow, TurnUsage, TurnWindow
from .validate import MAX_INT64

__all__ = [
    "Turn",
    "build_turns",
    "check_usage_total",
    "coerce_usage",
    "pending_turn",
    "span_of",
    "window_turns",
]


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a session's history (see :meth:`sessions.BufferedSession.turns`)."""

    number: int
    """1 for the oldest turn the history holds now."""
    first_key: int | None
    """Row key of the turn's first stored item (``None`` for the pending turn)."""
    last_key: int | None
    """Row key of its last stored item (``None`` for the pending turn)."""
    items: int
    """How many items it holds now."""
    created_at: datetime | None
    """When it was committed; ``None`` for the pending turn and for history stored
    without turn records."""
    run_id: str | None
    """The run id given with ``set_run_id()`` when its items were staged."""
    pending: bool = False
    """``True``: the staged, uncommitted items (always the last turn)."""
    usage: TurnUsage | None = None
    """The model usage recorded with it (``record_usage()``), if any."""


def build_turns(
    records: Sequence[TurnRow],
    keys: Sequence[int],
    *,
    clear: bool,
    pops: Collection[int],
    staged: int,
) -> list[Turn]:
    """The turns of a history: stored ``records`` and item ``keys`` (ordered), then a
    staged ``clear``, staged ``pops`` (row keys) and ``staged`` item count."""
    turns = [] if clear else _stored(records, [key for key in keys if key not in pops])
    if staged:
        turns.append(pending_turn(len(turns) + 1, staged))
    return turns


def window_turns(window: TurnWindow, *, newest: bool) -> list[Turn]:
    """The turns of an exact :class:`~sessions._model.backend.TurnWindow`: its rows are
    the oldest turns (numbered from 1), or with ``newest`` the newest ones (numbered up
    to ``window.count``)."""
    first = window.count - len(window.rows) + 1 if newest else 1
    turns: list[Turn] = []
    for number, row in enumerate(window.rows, start=first):
        assert row.items is not None
        turns.append(
            Turn(
                number,
                row.first_key,
                row.last_key,
                row.items,
                row.created_at,
                row.run_id,
                usage=row.usage,
            )
        )
    return turns


def pending_turn(number: int, staged: int) -> Turn:
    """The staged items as turn ``number``."""
    return Turn(number, None, None, staged, None, None, pending=True)


def _stored(records: Sequence[TurnRow], keys: Sequence[int]) -> list[Turn]:
    spans: list[tuple[TurnRow | None, int, int, int]] = []  # record, first, last, count
    index = 0
    for key in keys:
        while index < len(records) and records[index].last_key < key:
            index += 1
        record = records[index] if index < len(records) else None
        if record is not None and record.first_key > key:
            record = None  # between records: not covered
        if spans and spans[-1][0] is record:
            owner, first, _, count = spans[-1]
            spans[-1] = (owner, first, key, count + 1)
        else:
            spans.append((record, key, key, 1))
    return [
        Turn(
            number,
            first,
            last,
            count,
            None if record is None else record.created_at,
            None if record is None else record.run_id,
            usage=None if record is None else record.usage,
        )
        for number, (record, first, last, count) in enumerate(spans, start=1)
    ]


def span_of(turns: Sequence[Turn]) -> tuple[int, int, int] | None:
    """``(first_key, last_key, items)`` of the stored turns among ``turns`` (consecutive
    turns of one history), ``None`` if there is none."""
    stored = [turn for turn in turns if not turn.pending]
    if not stored:
        return None
    first, last = stored[0].first_key, stored[-1].last_key
    assert first is not None and last is not None
    return first, last, sum(turn.items for turn in stored)


_USAGE_FIELDS = (
    ("requests", "requests", None),
    ("input_tokens", "input_tokens", None),
    ("output_tokens", "output_tokens", None),
    ("cached_tokens", "input_tokens_details", "cached_tokens"),
    ("reasoning_tokens", "output_tokens_details", "reasoning_tokens"),
)


def coerce_usage(value: object) -> TurnUsage:
    """A :class:`TurnUsage` from itself or from an agents ``Usage``
    (``result.context_wrapper.usage``); anything else is a ``TypeError``, a count past
    :data:`~sessions._model.validate.MAX_INT64` (what a turn's 64-bit column holds) a
    ``ValueError`` naming it."""
    if isinstance(value, TurnUsage):
        counts: list[object] = list(value.values())
    else:
        counts = []
        for _, attribute, detail in _USAGE_FIELDS:
            part = getattr(value, attribute, None)
            if detail is not None:
                part = 0 if part is None else getattr(part, detail, None)
            counts.append(part)
    for (name, _, _), count in zip(_USAGE_FIELDS, counts, strict=True):
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TypeError(
                f"usage must be an agents Usage or a TurnUsage (got {type(value).__name__} "
                f"whose {name} is {count!r}, not an int >= 0)"
            )
    usage = TurnUsage(*(int(count) for count in counts))  # type: ignore[call-overload]
    check_usage_total(usage, "usage")
    return usage


def check_usage_total(usage: TurnUsage, what: str) -> None:
    """``ValueError`` unless every count of ``usage`` fits a turn's signed 64-bit column
    (``what`` says whose counts they are)."""
    for (name, _, _), count in zip(_USAGE_FIELDS, usage.values(), strict=True):
        if count > MAX_INT64:
            raise ValueError(
                f"{what}.{name} is {count}: a turn records at most {MAX_INT64} (2**63 - 1)"
            )

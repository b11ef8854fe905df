"""The turn index's rule, once for every backend: what its counts must be, given the rows.

SQLite and PostgreSQL keep, with every write and in its transaction, each turn record's
``items`` (how many stored items of its key range it holds now; a record hidden by a
rewind: how many hidden items) and each session's ``turn_count`` (visible records
holding items) and ``turn_items`` (the items those hold): ``docs/turns.md``, "The turn
index". ``sessions doctor`` checks them: a backend implementing
:class:`TurnIndexBackend` reads the stored counts and what the rows of each record's
range are (:class:`TurnIndexFacts`), :func:`turn_index_of` says what the counts must be
and :func:`index_mismatches` names each that is not; the repair writes what
:func:`turn_index_of` returns, from facts read inside its own transaction. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "IndexMismatch",
    "TurnIndex",
    "TurnIndexBackend",
    "TurnIndexFacts",
    "TurnIndexRecord",
    "IndexRepair",
    "facts_of_rows",
    "index_mismatches",
    "index_repair",
    "turn_index_of",
]


@dataclass(frozen=True, slots=True)
class TurnIndexRecord:
    """One stored turn record as the check reads it: its range, whether a rewind hid
    it, the count it stores, and how many rows its range holds."""

    first_key: int
    last_key: int
    hidden: bool
    items: int
    """The record's stored ``items`` count."""
    stored: int
    """How many stored (visible) items have a key in ``first_key..last_key``."""
    stored_hidden: int
    """How many hidden items (moved aside by a rewind) have a key in that range."""


@dataclass(frozen=True, slots=True)
class TurnIndexFacts:
    """A session's stored turn index and what its rows say, read in one snapshot (or
    inside the transaction of a repair)."""

    turn_count: int
    """The session row's stored ``turn_count``."""
    turn_items: int
    """The session row's stored ``turn_items``."""
    records: tuple[TurnIndexRecord, ...]
    """Every turn record of the session, hidden ones included, in ``first_key`` order."""


def facts_of_rows(rows: Sequence[Sequence[Any]]) -> TurnIndexFacts | None:
    """The facts from the rows of a backend's one index statement (``None``: no row, no
    session): per row the session's ``turn_count`` and ``turn_items``, then one record's
    first and last key, whether it is hidden, its ``items``, and the visible and hidden
    items its range holds (all NULL in a session's one row when it has no record)."""
    if not rows:
        return None
    records = tuple(
        TurnIndexRecord(int(r[2]), int(r[3]), bool(r[4]), int(r[5]), int(r[6]), int(r[7]))
        for r in rows
        if r[2] is not None
    )
    return TurnIndexFacts(int(rows[0][0]), int(rows[0][1]), records)


@runtime_checkable
class TurnIndexBackend(Protocol):
    """A backend that keeps a turn index and lets ``sessions doctor`` check it and
    recompute it: it reads the facts and writes what :func:`turn_index_of` returns."""

    async def load_turn_index(self, session_id: str) -> TurnIndexFacts | None:
        """The session's turn index and the row counts of its records' ranges, from one
        snapshot; ``None`` if the session has no row."""
        ...

    async def repair_turn_index(self, session_id: str) -> TurnIndexFacts | None:
        """In one write transaction that holds the session (no commit of it can
        interleave): read what :meth:`load_turn_index` reads, write the counts
        :func:`turn_index_of` derives from it (only those that differ; the version and
        ``updated_at`` stay), and return the facts as read before the write (``None``,
        nothing written: the session has no row)."""
        ...


@dataclass(frozen=True, slots=True)
class TurnIndex:
    """What a session's turn index must hold, by its rows (:func:`turn_index_of`)."""

    turn_count: int
    """Visible records holding items."""
    turn_items: int
    """The items those hold."""
    items: tuple[int, ...]
    """Each record's ``items``, in the order of :attr:`TurnIndexFacts.records`."""


def turn_index_of(facts: TurnIndexFacts) -> TurnIndex:
    """The turn index the rows of ``facts`` say: a visible record holds the stored
    items of its key range, a hidden record (a rewind's) the hidden items of its range;
    the session counts the visible records holding items (``turn_count``) and the
    items they hold (``turn_items``)."""
    items = tuple(r.stored_hidden if r.hidden else r.stored for r in facts.records)
    visible = [n for record, n in zip(facts.records, items, strict=True) if not record.hidden]
    return TurnIndex(sum(1 for n in visible if n > 0), sum(visible), items)


@dataclass(frozen=True, slots=True)
class IndexRepair:
    """What a repair of a session's turn index writes (:func:`index_repair`): only the
    counts that differ from what its rows say."""

    records: tuple[tuple[int, int], ...]
    """``(first_key, items)`` of each record whose ``items`` is wrong."""
    session: tuple[int, int] | None
    """``(turn_count, turn_items)`` for the session row, ``None`` when both are right."""


def index_repair(facts: TurnIndexFacts) -> IndexRepair:
    """The writes that make ``facts``' stored counts what :func:`turn_index_of` says."""
    want = turn_index_of(facts)
    records = tuple(
        (record.first_key, items)
        for record, items in zip(facts.records, want.items, strict=True)
        if record.items != items
    )
    session = (want.turn_count, want.turn_items)
    return IndexRepair(
        records, None if (facts.turn_count, facts.turn_items) == session else session
    )


@dataclass(frozen=True, slots=True)
class IndexMismatch:
    """One stored count of a session's turn index that its rows contradict."""

    what: str
    """``"turn_count"``, ``"turn_items"`` (the session's) or ``"items"`` (a record's)."""
    stored: int
    expected: int
    """What the rows say (:func:`turn_index_of`)."""
    first_key: int | None = None
    """The record's range (``"items"`` only)."""
    last_key: int | None = None
    hidden: bool = False
    """The record was hidden by a rewind."""

    @property
    def message(self) -> str:
        if self.first_key is None:
            where = self.what
        else:
            state = ", hidden" if self.hidden else ""
            where = f"turn record {self.first_key}..{self.last_key}{state}: items"
        return f"{where} is {self.stored}, the rows say {self.expected}"


def index_mismatches(facts: TurnIndexFacts) -> list[IndexMismatch]:
    """Every stored count of ``facts`` that disagrees with :func:`turn_index_of`: the
    session's ``turn_count`` and ``turn_items`` first, then the records', oldest first."""
    want = turn_index_of(facts)
    found = [
        IndexMismatch(what, stored, expected)
        for what, stored, expected in (
            ("turn_count", facts.turn_count, want.turn_count),
            ("turn_items", facts.turn_items, want.turn_items),
        )
        if stored != expected
    ]
    for record, expected in zip(facts.records, want.items, strict=True):
        if record.items != expected:
            found.append(
                IndexMismatch(
                    "items",
                    record.items,
                    expected,
                    record.first_key,
                    record.last_key,
                    record.hidden,
                )
            )
    return found

"""Which writes of a session a store has seen: lets a session trust what it committed.

A session judging a commit (:mod:`sessions._engine.integrity`) may need the end of the stored
history. What it committed itself is that end, as long as nothing else wrote to the
session since. :class:`WriteMarks` says so without a round trip, for the writes that
go through this store object (every commit, import, migration, repair, rewind and admin
delete of this process using it): every write of a session takes a new mark when it
begins and when it ends. A write that ran alone (no other write of the session began or
ended meanwhile) hands back a :class:`Held` mark; a session keeps it with what it
committed, and that memory holds while the session's mark is still the one held.

Writes through other store objects or other processes are not seen, so a concurrent
writer elsewhere is caught only by the database's own conditions, as with any check
that reads and then writes.

Nothing here outlives its use: a session's mark lives in a small cell that the store
keeps only weakly; the sessions holding a :class:`Held` keep it alive, and it goes with
the last of them (a store serving millions of sessions holds marks for the session
objects alive now, not for every session it ever wrote).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

__all__ = ["Began", "Held", "WriteMarks"]


class _Cell:
    """The current mark of one session."""

    __slots__ = ("__weakref__", "mark")

    def __init__(self, mark: int) -> None:
        self.mark = mark


@dataclass(slots=True)  # not frozen (cheaper to make, on every commit); never changed
class Began:
    """A write that began: its session's cell, its mark, and the mark just before it
    (``None``: no session object remembered one)."""

    cell: _Cell
    mark: int
    previous: int | None


@dataclass(slots=True)  # not frozen (cheaper to make, on every commit); never changed
class Held:
    """The mark a write that ran alone ended with: valid while it is still the
    session's (:attr:`valid`)."""

    cell: _Cell
    mark: int

    @property
    def valid(self) -> bool:
        return self.cell.mark == self.mark


class WriteMarks:
    __slots__ = ("_cells", "_tick")

    def __init__(self) -> None:
        self._cells: weakref.WeakValueDictionary[str, _Cell] = weakref.WeakValueDictionary()
        self._tick = 0

    def _next(self) -> int:
        self._tick += 1
        return self._tick

    def begin(self, session_id: str) -> Began:
        self._tick = mark = self._tick + 1  # _next(), in this frame: every commit runs it
        cell = self._cells.get(session_id)
        if cell is None:
            cell = self._cells[session_id] = _Cell(mark)
            return Began(cell, mark, None)
        previous = cell.mark
        cell.mark = mark
        return Began(cell, mark, previous)

    def end(self, began: Began) -> Held | None:
        """The write's closing mark if no other write of the session began or ended
        while it ran, else ``None``."""
        cell = began.cell
        alone = cell.mark == began.mark
        self._tick = cell.mark = self._tick + 1
        return Held(cell, cell.mark) if alone else None

    def forget(self, session_id: str | None = None) -> None:
        """A write that did not go through :meth:`begin` (an admin delete) changed this
        session (``None``: any session): no mark held for it is valid any more."""
        if session_id is None:
            cells = list(self._cells.values())
        else:
            cell = self._cells.get(session_id)
            cells = [] if cell is None else [cell]
        for cell in cells:
            cell.mark = self._next()

    def __len__(self) -> int:
        """How many sessions have a mark (those some session object still holds)."""
        return len(self._cells)

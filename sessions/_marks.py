"""Which writes of a session a store has seen: lets a session trust what it committed.

A session judging a commit (:mod:`sessions._integrity`) may need the end of the stored
history. What it committed itself is that end, as long as nothing else wrote to the
session since. :class:`WriteMarks` says so without a round trip, for the writes that
go through this store object (every commit, import, migration, repair and admin delete
of this process using it): every write of a session takes a new mark when it begins
and when it ends; a session keeps the mark its own commit ended with, and its memory
holds while the session's mark is still that one.

Writes through other store objects or other processes are not seen, so a concurrent
writer elsewhere is caught only by the database's own conditions, as with any check
that reads and then writes. Bounded: the marks of the least recently written sessions
are forgotten (their next check reads the database instead).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WriteMarks", "Began"]

#: How many sessions' marks a store keeps.
KEPT = 4096


@dataclass(frozen=True, slots=True)
class Began:
    """A write that began: its mark, and the session's mark just before it."""

    mark: int
    previous: int | None


class WriteMarks:
    __slots__ = ("_marks", "_tick")

    def __init__(self) -> None:
        self._marks: dict[str, int] = {}
        self._tick = 0

    def current(self, session_id: str) -> int | None:
        return self._marks.get(session_id)

    def _set(self, session_id: str) -> int:
        self._tick += 1
        marks = self._marks
        marks.pop(session_id, None)  # to the end: least recently written first
        marks[session_id] = self._tick
        if len(marks) > KEPT:
            del marks[next(iter(marks))]
        return self._tick

    def begin(self, session_id: str) -> Began:
        previous = self._marks.get(session_id)
        return Began(self._set(session_id), previous)

    def end(self, session_id: str, began: Began) -> int | None:
        """The write's closing mark if no other write of the session began or ended
        while it ran, else ``None``."""
        alone = self._marks.get(session_id) == began.mark
        mark = self._set(session_id)
        return mark if alone else None

    def forget(self, session_id: str | None = None) -> None:
        """A write that bypassed :meth:`begin` (an admin delete): ``None``: of any session."""
        if session_id is None:
            self._marks.clear()
        else:
            self._marks.pop(session_id, None)

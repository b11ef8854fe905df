"""``sessions._marks.WriteMarks``: when a session may trust what it committed itself."""

from __future__ import annotations

from sessions import _marks
from sessions._marks import WriteMarks


def test_a_write_alone_ends_with_the_mark_the_session_then_holds() -> None:
    marks = WriteMarks()
    began = marks.begin("a")
    mark = marks.end("a", began)
    assert mark is not None and marks.current("a") == mark
    assert marks.begin("a").previous == mark


def test_overlapping_writes_of_one_session_leave_neither_a_mark() -> None:
    marks = WriteMarks()
    first = marks.begin("a")
    second = marks.begin("a")
    assert marks.end("a", first) is None
    assert marks.end("a", second) is None


def test_a_write_of_another_session_does_not_disturb() -> None:
    marks = WriteMarks()
    began = marks.begin("a")
    marks.end("b", marks.begin("b"))
    assert marks.end("a", began) is not None


def test_forget_drops_one_session_or_all() -> None:
    marks = WriteMarks()
    a = marks.end("a", marks.begin("a"))
    b = marks.end("b", marks.begin("b"))
    marks.forget("a")
    assert (marks.current("a"), marks.current("b")) == (None, b)
    marks.forget()
    assert marks.current("b") is None and a != b


def test_the_least_recently_written_sessions_are_forgotten_past_the_bound() -> None:
    marks = WriteMarks()
    marks.end("old", marks.begin("old"))
    for i in range(_marks.KEPT - 1):
        marks.end(f"s{i}", marks.begin(f"s{i}"))
    marks.end("old", marks.begin("old"))  # written again: now the most recent
    marks.end("new", marks.begin("new"))
    assert marks.current("old") is not None
    assert marks.current("s0") is None
    assert len(marks._marks) == _marks.KEPT

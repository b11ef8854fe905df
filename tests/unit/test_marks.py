"""``sessions._engine.marks.WriteMarks``: when a session may trust what it committed itself."""

from __future__ import annotations

import gc

from sessions._engine.marks import WriteMarks


def test_a_write_alone_ends_with_a_mark_that_holds_until_the_next_write() -> None:
    marks = WriteMarks()
    held = marks.end(marks.begin("a"))
    assert held is not None and held.valid
    began = marks.begin("a")
    assert began.previous == held.mark
    assert not held.valid


def test_overlapping_writes_of_one_session_leave_neither_a_mark() -> None:
    marks = WriteMarks()
    first = marks.begin("a")
    second = marks.begin("a")
    assert marks.end(first) is None
    assert marks.end(second) is None


def test_a_write_of_another_session_does_not_disturb() -> None:
    marks = WriteMarks()
    began = marks.begin("a")
    held_a = marks.end(began)
    held_b = marks.end(marks.begin("b"))
    assert held_a is not None and held_b is not None
    assert held_a.valid and held_b.valid


def test_forget_invalidates_one_session_or_all() -> None:
    marks = WriteMarks()
    a = marks.end(marks.begin("a"))
    b = marks.end(marks.begin("b"))
    assert a is not None and b is not None
    marks.forget("a")
    assert (a.valid, b.valid) == (False, True)
    marks.forget()
    assert not b.valid
    marks.forget("never written")  # nothing to invalidate, no error


def test_the_store_keeps_no_mark_that_no_session_holds() -> None:
    marks = WriteMarks()
    kept = [marks.end(marks.begin(f"s{i}")) for i in range(100)]
    assert len(marks) == 100
    del kept[10:]
    gc.collect()
    assert len(marks) == 10
    for i in range(1000):  # writes nobody remembers leave nothing behind
        marks.end(marks.begin(f"t{i}"))
    assert len(marks) == 10

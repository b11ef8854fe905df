"""SQLite's part of group commit: the job that takes the commits waiting to the worker
thread and applies them in one transaction (the scheduler itself: :mod:`sessions._engine.group`)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence

from .._engine.group import Entry, Outcome, Scheduler, outcomes_of
from .._engine.observe import HOOK
from .._model.backend import Batch
from .commit import apply_batches, apply_transaction
from .connection import writing
from .worker import call_in_loop

__all__ = ["Group", "apply_group"]


class Group:
    """SQLite's part of group commit (:mod:`sessions._engine.group` says why it is not shared):
    the job that takes the commits waiting to the worker thread.

    The first commit to arrive while no such job is queued queues one; commits
    arriving before the worker gets to it wait with it. The worker takes every commit
    waiting then (nobody can join any more) and applies them in one
    ``BEGIN IMMEDIATE ... COMMIT``, each in a savepoint of its own, so a failing entry
    is rolled back alone while the others are applied. One fsync and one thread hop
    then serve every session that committed meanwhile.
    """

    __slots__ = ("lock", "scheduler", "system")

    def __init__(self, system: str) -> None:
        # One job at a time is queued; its "send" ends when the worker takes the group.
        self.scheduler = Scheduler(1)
        self.lock = threading.Lock()  # the worker thread takes while event loops queue
        self.system = system

    def queue(
        self, entry: Entry, done: asyncio.Future[Outcome], submit: Callable[[], None]
    ) -> None:
        """Queue ``entry`` (``done`` gets its outcome), queuing this job if none is."""
        with self.lock:
            scheduler = self.scheduler
            scheduler.wait(entry, done)
            if not scheduler.free():
                return  # the job queued will take it
            scheduler.start(0)
            try:
                submit()
            except BaseException:
                scheduler.withdraw(entry)
                scheduler.finish(0)
                raise

    def take(self) -> list[Entry]:
        with self.lock:
            group = self.scheduler.take()
            self.scheduler.finish(0)
            return group

    def run(self, conn: sqlite3.Connection) -> None:
        """On the worker thread: apply the group, then hand the outcomes to the loops."""
        group = self.take()
        if not group:
            return
        carried = 0  # commits of a transaction that ran (the observer counts those)

        def apply(entries: Sequence[Entry]) -> list[Outcome]:
            nonlocal carried
            outcomes = apply_group(conn, [(e.session_id, e.batches) for e in entries])
            carried = len(entries)
            return outcomes

        self.scheduler.count(group)
        self._deliver(group, outcomes_of(group, apply), carried)

    def fail(self, error: BaseException) -> None:
        """The worker stopped before running the job: nothing of it was applied."""
        group = self.take()
        self._deliver(group, [error] * len(group), 0)

    def _deliver(self, group: list[Entry], outcomes: list[Outcome], carried: int) -> None:
        """One hop to each event loop the group's callers wait in (usually one)."""
        if len(group) == 1:  # one commit (one session committing at a time): no sorting
            (entry,) = group
            assert entry.done is not None
            call_in_loop(entry.done.get_loop(), self._complete, group, outcomes, carried)
            return
        loops: dict[asyncio.AbstractEventLoop, tuple[list[Entry], list[Outcome]]] = {}
        for entry, outcome in zip(group, outcomes, strict=True):
            assert entry.done is not None
            mine = loops.setdefault(entry.done.get_loop(), ([], []))
            mine[0].append(entry)
            mine[1].append(outcome)
        for loop, (entries, results) in loops.items():
            call_in_loop(loop, self._complete, entries, results, carried)
            carried = 0  # counted once

    def _complete(self, entries: list[Entry], outcomes: list[Outcome], carried: int) -> None:
        if carried:
            observer = HOOK.observer
            if observer is not None:
                observer.group(self.system, carried)
        self.scheduler.settle(entries, outcomes)


def apply_group(
    conn: sqlite3.Connection, entries: list[tuple[str, Sequence[Batch]]]
) -> list[Outcome]:
    """Per entry ``None`` (applied) or the exception that rolled it back.

    An exception raised out of here means nothing of the group was applied.
    """
    if len(entries) == 1:
        try:
            apply_transaction(conn, *entries[0])
        except Exception as exc:  # noqa: BLE001 - returned to its waiter
            return [exc]
        return [None]
    outcome: list[Outcome] = []
    with writing(conn):
        # The time is read once the write lock is held: a commit another process made while
        # this one waited for it never carries a later time than ours (updated_at only grows).
        now = time.time()
        for session_id, batches in entries:
            conn.execute("SAVEPOINT txs_entry")
            try:
                apply_batches(conn, session_id, batches, now)
            except Exception as exc:
                if not conn.in_transaction:
                    raise  # SQLite rolled the whole transaction back (I/O error, full, ...)
                conn.execute("ROLLBACK TO txs_entry")
                conn.execute("RELEASE txs_entry")
                outcome.append(exc)
            else:
                conn.execute("RELEASE txs_entry")
                outcome.append(None)
    return outcome

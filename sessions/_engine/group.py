"""Group commit, written once: commits of many sessions that share one transaction.

A backend hands each ``apply`` call of the group path to a :class:`Scheduler` as an
:class:`Entry`. The scheduler queues the entries, cuts the queue into groups (arrival
order, within the backend's :class:`Bounds`) and hands each entry its own outcome;
:func:`outcomes_of` (:func:`outcomes_of_async`) runs the backend's *apply* callable on
a group: one transaction, one outcome per entry (``None`` for applied, or the
exception that rolled that entry back alone), an exception raised only if nothing of
the group was applied (then every entry gets it). Nothing here does I/O.

One entry moves through named states (:class:`State`), every move checked against
``_MOVES``, the one table of them::

    WAITING ──take()─────────▶ SENT ──settle() / finish_alone()──▶ DONE
       │ └──goes_alone(): nothing waits, a send is free ─▲
       └──withdraw(): its caller left, nothing was sent──▶ WITHDRAWN

A *send* is a group's departure the backend has under way; at most ``limit`` at once.
What each backend keeps, because it cannot be shared:

* **When a group leaves, and where the callable runs.** PostgreSQL applies a group on
  a pooled asyncpg connection in a task of the event loop, so a send lasts until its
  outcome: a commit that finds nothing waiting and a send free goes at once, in its
  caller's task (:meth:`Scheduler.goes_alone`), and whenever a send ends, the waiting
  commits leave in the next one. SQLite applies a group on its worker thread, which
  runs jobs one by one: its send is one job queued for the worker and lasts until the
  worker gets to it and takes every commit waiting then (so commits keep joining while
  the worker finishes what it is doing), and the outcomes go back to each caller's
  event loop with ``call_soon_threadsafe``. As the worker thread takes while event
  loops queue, SQLite calls the scheduler under a lock of its own; PostgreSQL, whose
  calls all run in one event loop, needs none.
* **Cancellation.** PostgreSQL withdraws a commit whose caller is cancelled while it
  waits, and cancels a lone commit's own send; SQLite's group holds no task to cancel,
  so a cancelled caller's commit is applied with its group (the core treats the
  outcome of a cancelled ``apply`` as unknown either way).
"""

from __future__ import annotations

import asyncio
import collections
import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from .._model.backend import Batch
from ..errors import StorageError, StoreClosedError, TransientStorageError

Outcome = BaseException | None
"""One entry's outcome: ``None`` (applied) or the exception it failed with."""


class State(enum.Enum):
    """Where one commit of the group path is."""

    WAITING = "waiting"
    """Queued for a group; may still be withdrawn (nothing of it was sent)."""
    SENT = "sent"
    """In a group under way (or alone): its outcome will come."""
    DONE = "done"
    """Its outcome is known and was handed over."""
    WITHDRAWN = "withdrawn"
    """Its caller left while it waited: never sent, nothing applied."""


# The members once more, as plain module names: on the hot path (every commit), as
# reading ``State.SENT`` and hashing a member both run Python code on Python 3.11.
_WAITING, _SENT, _DONE, _WITHDRAWN = State.WAITING, State.SENT, State.DONE, State.WITHDRAWN

#: Every move an entry may make (``(from, to)``); any other is a bug of ours.
_MOVES: tuple[tuple[State, State], ...] = (
    (_WAITING, _SENT),
    (_WAITING, _WITHDRAWN),
    (_SENT, _DONE),
)


class Entry:
    """One ``apply`` call: a session's batches, its state, and where its outcome goes."""

    __slots__ = ("alone", "batches", "done", "session_id", "state", "task")

    def __init__(self, session_id: str, batches: Sequence[Batch]) -> None:
        self.session_id = session_id
        self.batches = batches
        self.state = _WAITING
        self.done: asyncio.Future[Outcome] | None = None  # set while it waits in the queue
        self.task: asyncio.Future[None] | None = None  # the backend's send, if it has one
        self.alone = True  # the only entry of its group: its outcome is its own

    def items(self) -> int:
        return sum(len(batch.items) for batch in self.batches)

    def move(self, to: State) -> None:
        if (self.state, to) not in _MOVES:
            raise RuntimeError(f"group commit: an entry cannot go from {self.state} to {to}")
        self.state = to


@dataclass(frozen=True)
class Bounds:
    """What one group may carry; ``None`` is no bound."""

    commits: int | None = None
    items: int | None = None
    """Items of all its batches (a single commit larger than this still goes, alone)."""
    split_min: int | None = None
    """Once more commits than this wait, a group takes at most one send's share of the
    commits waiting and in flight (rounded up): see ``_GROUP_SPLIT_MIN`` in
    :mod:`sessions.postgres.group` for why."""


@dataclass(frozen=True)
class GroupCommitStats:
    """What a backend's group commit has done since the store opened."""

    transactions: int
    """Append transactions sent (one round trip and one WAL flush each)."""
    commits: int
    """``apply`` calls those transactions carried."""
    largest: int
    """The most commits one transaction carried."""
    isolated: int
    """Groups whose shared statement failed and were applied again entry by entry."""


class Scheduler:
    """The queue of waiting commits, the sends under way, and every state move."""

    __slots__ = (
        "bounds",
        "commits",
        "in_flight",
        "isolated",
        "largest",
        "limit",
        "pending",
        "sending",
        "transactions",
    )

    def __init__(self, limit: int, bounds: Bounds = Bounds()) -> None:
        self.limit = limit  # sends at once
        self.bounds = bounds
        self.sending = 0
        self.in_flight = 0  # commits in the sends under way
        self.pending: collections.deque[Entry] = collections.deque()
        self.transactions = 0
        self.commits = 0
        self.largest = 0
        self.isolated = 0

    # ------------------------------------------------------------------ sends

    def free(self) -> bool:
        return self.sending < self.limit

    def start(self, commits: int) -> None:
        """A send of ``commits`` commits leaves."""
        self.sending += 1
        self.in_flight += commits

    def finish(self, commits: int) -> None:
        """A send of ``commits`` commits has ended."""
        self.sending -= 1
        self.in_flight -= commits

    # ------------------------------------------------------------------ entries

    def goes_alone(self, entry: Entry) -> bool:
        """Whether ``entry`` leaves at once, alone, in a send of its own (nothing
        waits and a send is free); if so it is SENT and the send started."""
        if self.pending or not self.free():
            return False
        entry.move(_SENT)
        entry.alone = True
        self.start(1)
        return True

    def finish_alone(self, entry: Entry) -> None:
        """The send :meth:`goes_alone` started has ended (its outcome is the caller's)."""
        entry.move(_DONE)
        self.finish(1)

    def wait(self, entry: Entry, done: asyncio.Future[Outcome]) -> None:
        """Queue ``entry``; ``done`` gets its outcome."""
        entry.done = done
        self.pending.append(entry)

    def withdraw(self, entry: Entry) -> bool:
        """Take ``entry`` out of the queue if it still waits (then nothing of it was
        sent); ``False`` if it already left."""
        if entry.state is not _WAITING:
            return False
        self.pending.remove(entry)
        entry.move(_WITHDRAWN)
        return True

    def take(self) -> list[Entry]:
        """The next group: waiting commits in arrival order, within the bounds."""
        bounds = self.bounds
        most = len(self.pending) if bounds.commits is None else bounds.commits
        if bounds.split_min is not None:
            share = -(-(len(self.pending) + self.in_flight) // self.limit)  # rounded up
            most = min(most, max(bounds.split_min, share))
        group: list[Entry] = []
        items = 0
        while self.pending and len(group) < most:
            if bounds.items is not None:
                size = self.pending[0].items()
                if group and items + size > bounds.items:
                    break
                items += size
            group.append(self.pending.popleft())
        alone = len(group) == 1
        for entry in group:
            entry.move(_SENT)
            entry.alone = alone
        return group

    def settle(self, group: Sequence[Entry], outcomes: Sequence[Outcome]) -> None:
        """Hand each entry of ``group`` its outcome (a shared error as a copy of its own);
        an entry whose caller has gone (``done`` cancelled) is skipped."""
        for entry, outcome in zip(group, outcomes, strict=True):
            entry.move(_DONE)
            done = entry.done
            if done is not None and not done.done():
                done.set_result(outcome if entry.alone or outcome is None else for_entry(outcome))

    # ------------------------------------------------------------------ applying

    def count(self, group: Sequence[Entry]) -> None:
        """A transaction carrying ``group`` is sent."""
        self.transactions += 1
        self.commits += len(group)
        self.largest = max(self.largest, len(group))

    def stats(self) -> GroupCommitStats:
        return GroupCommitStats(self.transactions, self.commits, self.largest, self.isolated)


def outcomes_of(
    group: Sequence[Entry], apply: Callable[[Sequence[Entry]], list[Outcome]]
) -> list[Outcome]:
    """``apply(group)``'s outcomes, or its exception for every entry (nothing applied)."""
    try:
        return _checked(group, apply(group))
    except BaseException as exc:  # noqa: BLE001 - every caller gets its outcome
        return [exc] * len(group)


async def outcomes_of_async(
    group: Sequence[Entry], apply: Callable[[Sequence[Entry]], Awaitable[list[Outcome]]]
) -> list[Outcome]:
    """:func:`outcomes_of` for an asynchronous ``apply``."""
    try:
        return _checked(group, await apply(group))
    except BaseException as exc:  # noqa: BLE001 - every caller gets its outcome
        return [exc] * len(group)


def _checked(group: Sequence[Entry], outcomes: list[Outcome]) -> list[Outcome]:
    if len(outcomes) != len(group):
        raise RuntimeError(f"group commit: {len(outcomes)} outcomes for {len(group)} commits")
    return outcomes


def for_entry(outcome: Outcome) -> Outcome:
    """A fresh copy of a group's shared error, so that each caller raises its own."""
    copy: Exception
    if isinstance(outcome, TransientStorageError):
        copy = TransientStorageError(str(outcome), outcome_known=outcome.outcome_known)
    elif isinstance(outcome, StoreClosedError):
        copy = StoreClosedError(str(outcome))
    elif type(outcome) is StorageError:
        copy = StorageError(str(outcome))
    else:
        return outcome
    copy.__cause__ = outcome.__cause__
    return copy

"""The PostgreSQL backend's part of group commit (the scheduler itself:
:mod:`sessions._engine.group`).

Appends of many sessions that arrive while others are in flight are sent together: one
statement for all their batches (``Statements.append_group``, the same as the append
statement once per batch), one round trip, one transaction, one WAL flush. If the server
rejects the group, it is applied again entry by entry, each in a savepoint of one
transaction, so a failing commit fails alone.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from .._engine.group import Bounds, Entry, GroupCommitStats, Outcome, Scheduler, outcomes_of_async
from .._engine.observe import HOOK
from .._engine.shield import Firm
from .connect import Connections
from .faults import _RETRY_STATES, _classify, _is_connection_loss, _Phase
from .sql import _turn_args

# How many append sends may be in flight at once (at most the pool's size); commits
# arriving meanwhile wait and leave together in the next one. Fewer sends mean larger
# groups (fewer statements and WAL flushes), more mean less waiting. Two keep the server
# busy with one group while the client wakes the callers of the other and gathers the
# next.
_GROUP_SENDS = 2
# Bounds on one group statement.
_GROUP_MAX_COMMITS = 256
# A group takes at most its share (one per send) of the commits waiting and in flight,
# if that is more than this. Without it, the commits of many sessions fall into one
# convoy: one group's callers all wake in one turn of the event loop and all commit
# again before the loop reads any other answer, so they wait together again and the
# server idles while the client runs, then the client while the server does. Split, the
# server applies one group while the client runs the callers of the other (workload (c)
# of ``python -m benchmarks`` at 100 and 500 sessions). Below this size both take well
# under a millisecond either way, and a group that stays whole keeps one transaction.
_GROUP_SPLIT_MIN = 16
_GROUP_MAX_ITEMS = 8192

_BOUNDS = Bounds(commits=_GROUP_MAX_COMMITS, items=_GROUP_MAX_ITEMS, split_min=_GROUP_SPLIT_MIN)


class _Grouper(Scheduler):
    """Append-only commits waiting to share one statement (group commit,
    :mod:`sessions._engine.group`).

    At most ``limit`` sends are in flight at once. A commit that finds a send free and
    nobody waiting goes at once, alone, in its caller's task: a lone commit costs what
    it always did. Otherwise it waits here, and whenever a send ends the waiting
    commits leave in the next one, in arrival order: all of them, up to the bounds
    and, once there are many, to one send's share of the commits waiting and in
    flight (``_GROUP_SPLIT_MIN``).
    """

    __slots__ = ("tasks",)

    def __init__(self, limit: int) -> None:
        super().__init__(limit, _BOUNDS)
        self.tasks: set[asyncio.Future[None]] = set()  # the sends under way


def _group_args(group: Sequence[Entry]) -> list[tuple[Any, ...]]:
    """The append statement's arguments, one tuple per batch.

    Entries go in session-id order (stable, so one session's batches keep their
    order): every group locks session rows in the same order and cannot deadlock
    with another.
    """
    ordered = group if len(group) == 1 else sorted(group, key=lambda e: e.session_id)
    return [
        (
            entry.session_id,
            batch.batch_id,
            list(batch.items),
            len(batch.items),
            *_turn_args(batch),
            batch.incarnation,
        )
        for entry in ordered
        for batch in entry.batches
    ]


#: Between two items in the group statement's items parameter. No JSON text holds it:
#: JSON escapes every control character in its strings and allows none elsewhere.
ITEM_SEPARATOR = "\x1e"


def _group_columns(args: Sequence[tuple[Any, ...]]) -> list[Any]:
    """The arguments of the group statement (``Statements.append_group``) from the
    batches' :func:`_group_args`: each column of theirs but the items, one element per
    batch, then every batch's items, one after the other, in one text, joined by
    :data:`ITEM_SEPARATOR`. (One text: an array of an element per item costs the client
    about a microsecond per element to encode; the server splits the text for less
    than it took to receive the array.)"""
    sessions, batch_ids, texts, counts, *rest = zip(*args, strict=True)
    items = [text for batch in texts for text in batch]
    joined = ITEM_SEPARATOR.join(items)
    if joined.count(ITEM_SEPARATOR) != max(0, len(items) - 1):
        # Every text is JSON from our own encoders: this is a bug, and no guess is sent.
        raise RuntimeError("an item text to commit holds U+001E: it is not JSON text")
    return [sessions, batch_ids, counts, *rest, joined]


async def _hold(task: asyncio.Future[None]) -> None:
    """Wait until ``task`` has finished, whatever cancellations arrive meanwhile."""
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            continue


class GroupPart(Connections):
    """Append-only commits, sent alone or in groups (:class:`_Grouper`)."""

    @functools.cached_property
    def _grouper(self) -> _Grouper:
        """The commits waiting and the sends under way; made on first use (the pool's
        size never changes)."""
        return _Grouper(max(1, min(_GROUP_SENDS, self._pool.get_max_size())))

    @property
    def group_stats(self) -> GroupCommitStats:
        """Counters of the group commit (transactions, commits carried, largest group)."""
        return self._grouper.stats()

    async def _append(self, entry: Entry) -> None:
        grouper = self._grouper
        if grouper.goes_alone(entry):
            # Nothing to share a statement with: send it now, in this task.
            try:
                outcomes = await self._run(
                    "commit", lambda conn, phase: self._send(conn, phase, [entry])
                )
            finally:
                grouper.finish_alone(entry)
                self._kick()
            outcome = outcomes[0]
        else:
            self._inflight += 1  # settled by the send that takes it (or when withdrawn)
            grouper.wait(entry, Firm(loop=asyncio.get_running_loop()))
            self._kick()
            outcome = await self._wait(entry)
        if outcome is not None:
            raise outcome

    async def _wait(self, entry: Entry) -> Outcome:
        assert entry.done is not None
        try:
            # Not shielded: a cancellation cancels ``done``, which the send then skips.
            return await entry.done
        except asyncio.CancelledError:
            if self._grouper.withdraw(entry):  # still waiting: nothing was sent
                self._settled(1)
            elif entry.alone and entry.task is not None:  # its own send: cancel it,
                entry.task.cancel()  # as if run in this task
                await _hold(entry.task)
            raise

    def _kick(self) -> None:
        """Start a send for the commits waiting, while sends are free."""
        grouper = self._grouper
        while grouper.pending and grouper.free():
            group = grouper.take()
            grouper.start(len(group))
            task = asyncio.ensure_future(self._flush(group))
            grouper.tasks.add(task)
            task.add_done_callback(grouper.tasks.discard)
            for entry in group:
                entry.task = task

    async def _flush(self, group: list[Entry]) -> None:
        """A background send of a group; each entry's outcome goes to its caller."""
        try:
            outcomes = await outcomes_of_async(
                group,
                lambda group: self._on_connection(
                    "commit", lambda conn, phase: self._send(conn, phase, group)
                ),
            )
            self._grouper.settle(group, outcomes)
        finally:
            self._grouper.finish(len(group))
            self._settled(len(group))
            self._kick()

    async def _send(self, conn: Any, phase: _Phase, group: Sequence[Entry]) -> list[Outcome]:
        """Every batch of the group in one round trip and one transaction.

        One batch: the append statement. More: the group statement, over all of them
        (:func:`_group_columns`); either is one autocommit statement (one WAL flush).
        If the server rejects a group (a trigger, a constraint, a session deleted
        meanwhile: nothing was applied), the entries are applied again one by one, each
        in a savepoint of one transaction.
        """
        self._grouper.count(group)
        observer = HOOK.observer
        if observer is not None:
            observer.group(self.system, len(group))
        args = _group_args(group)
        phase.commit_sent = True  # autocommit: the statement(s) are the commit
        if len(args) == 1:
            await conn.execute(self._sql.append, *args[0])
            return [None]
        try:
            await conn.execute(self._sql.append_group, *_group_columns(args))
        except asyncpg.PostgresError as exc:
            if len(group) == 1 or _is_connection_loss(exc) or exc.sqlstate in _RETRY_STATES:
                raise
            phase.commit_sent = False  # rolled back whole: nothing of the group applied
            return await self._isolate(conn, phase, group)
        return [None] * len(group)

    async def _isolate(self, conn: Any, phase: _Phase, group: Sequence[Entry]) -> list[Outcome]:
        self._grouper.isolated += 1
        outcomes: list[Outcome] = []
        await conn.execute("BEGIN")
        for entry in group:
            await conn.execute("SAVEPOINT txs_entry")
            try:
                await conn.executemany(self._sql.append, _group_args([entry]))
            except asyncpg.PostgresError as exc:
                if _is_connection_loss(exc):
                    raise
                await conn.execute("ROLLBACK TO SAVEPOINT txs_entry")
                outcomes.append(_classify(exc, "commit", phase))
            else:
                outcomes.append(None)
            await conn.execute("RELEASE SAVEPOINT txs_entry")
        phase.commit_sent = True
        await conn.execute("COMMIT")
        return outcomes

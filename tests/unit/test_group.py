"""The group-commit scheduler itself (``sessions._engine.group``), with fake apply callables:
no database, no thread. The backends' use of it is tested against real databases in
``tests/test_postgres_group.py``, ``tests/contract/test_group_commit.py``,
``tests/test_group_split.py`` and ``tests/test_sqlite.py``."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions import Batch
from sessions._engine.group import (
    Bounds,
    Entry,
    Outcome,
    Scheduler,
    State,
    for_entry,
    outcomes_of,
    outcomes_of_async,
)
from sessions.errors import ConflictError, StorageError, TransientStorageError


def _entry(number: int, items: int = 1) -> Entry:
    return Entry(f"s{number}", [Batch(f"b{number}", False, (), ("{}",) * items)])


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _queued(
    scheduler: Scheduler, loop: asyncio.AbstractEventLoop, count: int, items: int = 1
) -> list[Entry]:
    entries = [_entry(n, items) for n in range(count)]
    for entry in entries:
        scheduler.wait(entry, loop.create_future())
    return entries


# ---------------------------------------------------------------------- states


def test_an_entry_goes_waiting_sent_done(loop: asyncio.AbstractEventLoop) -> None:
    scheduler = Scheduler(1)
    [entry] = _queued(scheduler, loop, 1)
    assert entry.state is State.WAITING
    assert scheduler.take() == [entry]
    assert entry.state is State.SENT and entry.alone
    scheduler.settle([entry], [None])
    assert entry.state is State.DONE
    assert entry.done is not None and entry.done.result() is None


def test_a_waiting_entry_is_withdrawn_and_never_sent(loop: asyncio.AbstractEventLoop) -> None:
    scheduler = Scheduler(1)
    first, second = _queued(scheduler, loop, 2)
    assert scheduler.withdraw(first)
    assert first.state is State.WITHDRAWN
    assert scheduler.take() == [second]
    assert not scheduler.withdraw(second), "a sent entry cannot be withdrawn"
    assert second.state is State.SENT


@pytest.mark.parametrize(
    ("moves", "illegal"),
    [
        ([], State.DONE),  # an outcome for an entry never sent
        ([State.SENT, State.DONE], State.SENT),  # sent twice
        ([State.SENT, State.DONE], State.DONE),  # settled twice
        ([State.WITHDRAWN], State.SENT),  # a withdrawn entry sent after all
        ([State.SENT], State.WITHDRAWN),  # withdrawn once sent
        ([State.SENT], State.WAITING),
    ],
)
def test_every_other_move_is_refused(moves: list[State], illegal: State) -> None:
    entry = _entry(0)
    for state in moves:
        entry.move(state)
    with pytest.raises(RuntimeError, match="group commit"):
        entry.move(illegal)


def test_a_lone_commit_goes_at_once_only_when_nothing_waits_and_a_send_is_free(
    loop: asyncio.AbstractEventLoop,
) -> None:
    scheduler = Scheduler(2)
    lone = _entry(0)
    assert scheduler.goes_alone(lone)
    assert lone.state is State.SENT and scheduler.sending == 1 and scheduler.in_flight == 1
    second = _entry(1)
    assert scheduler.goes_alone(second)  # the second send
    third = _entry(2)
    assert not scheduler.goes_alone(third), "no send free"
    assert third.state is State.WAITING
    scheduler.finish_alone(lone)
    assert lone.state is State.DONE and scheduler.sending == 1 and scheduler.in_flight == 1
    _queued(scheduler, loop, 1)
    assert not scheduler.goes_alone(_entry(3)), "a send is free but a commit waits"


# ---------------------------------------------------------------------- groups


def test_unbounded_a_group_is_every_commit_waiting_in_arrival_order(
    loop: asyncio.AbstractEventLoop,
) -> None:
    scheduler = Scheduler(1)
    entries = _queued(scheduler, loop, 300, items=100)
    group = scheduler.take()
    assert group == entries
    assert not any(entry.alone for entry in group)
    assert scheduler.take() == []


def test_a_commit_larger_than_the_item_bound_goes_alone(loop: asyncio.AbstractEventLoop) -> None:
    scheduler = Scheduler(1, Bounds(items=10))
    small, large, after = _entry(0, 2), _entry(1, 50), _entry(2, 2)
    for entry in (small, large, after):
        scheduler.wait(entry, loop.create_future())
    assert scheduler.take() == [small]
    assert scheduler.take() == [large]
    assert large.alone
    assert scheduler.take() == [after]


@given(
    limit=st.integers(1, 6),
    waiting=st.integers(0, 300),
    in_flight=st.integers(0, 300),
    items=st.integers(1, 40),
    commits=st.one_of(st.none(), st.integers(1, 100)),
    max_items=st.one_of(st.none(), st.integers(1, 500)),
    split_min=st.one_of(st.none(), st.integers(1, 50)),
)
@settings(max_examples=200, deadline=None)
def test_a_group_is_the_longest_prefix_within_every_bound(
    limit: int,
    waiting: int,
    in_flight: int,
    items: int,
    commits: int | None,
    max_items: int | None,
    split_min: int | None,
) -> None:
    scheduler = Scheduler(limit, Bounds(commits=commits, items=max_items, split_min=split_min))
    scheduler.pending.extend(_entry(n, items) for n in range(waiting))
    if in_flight:
        scheduler.start(in_flight)
    before = list(scheduler.pending)
    group = scheduler.take()
    assert group == before[: len(group)]
    assert all(entry.state is State.SENT for entry in group)
    assert all(entry.state is State.WAITING for entry in scheduler.pending)
    if waiting:
        assert group, "a send never leaves empty while commits wait"
    most = waiting if commits is None else commits
    if split_min is not None:
        most = min(most, max(split_min, -(-(waiting + in_flight) // limit)))
    assert len(group) <= most
    if max_items is not None:
        assert len(group) == 1 or len(group) * items <= max_items
    if scheduler.pending:  # held back only by a bound
        fits = max_items is None or (len(group) + 1) * items <= max_items
        assert len(group) == most or not fits


# ---------------------------------------------------------------------- outcomes


def test_each_entry_gets_its_own_outcome(loop: asyncio.AbstractEventLoop) -> None:
    scheduler = Scheduler(1)
    entries = _queued(scheduler, loop, 3)
    group = scheduler.take()
    conflict = ConflictError("pops gone")
    scheduler.settle(group, [None, conflict, None])
    results = [entry.done.result() for entry in entries if entry.done is not None]
    assert results == [None, conflict, None]


def test_a_shared_storage_error_reaches_each_caller_as_a_copy_of_its_own(
    loop: asyncio.AbstractEventLoop,
) -> None:
    scheduler = Scheduler(1)
    entries = _queued(scheduler, loop, 3)
    group = scheduler.take()
    cause = OSError("connection reset")
    shared = TransientStorageError("lost", outcome_known=False)
    shared.__cause__ = cause
    scheduler.settle(group, [shared] * 3)
    got = [entry.done.result() for entry in entries if entry.done is not None]
    assert len({id(error) for error in got}) == 3 and shared not in got
    for error in got:
        assert isinstance(error, TransientStorageError)
        assert str(error) == "lost" and error.outcome_known is False
        assert error.__cause__ is cause


def test_a_lone_entry_gets_the_error_itself(loop: asyncio.AbstractEventLoop) -> None:
    scheduler = Scheduler(1)
    [entry] = _queued(scheduler, loop, 1)
    error = StorageError("disk full")
    scheduler.settle(scheduler.take(), [error])
    assert entry.done is not None and entry.done.result() is error


def test_for_entry_copies_only_the_errors_it_knows() -> None:
    plain = StorageError("x")
    assert for_entry(plain) is not plain and type(for_entry(plain)) is StorageError
    conflict = ConflictError("y")
    assert for_entry(conflict) is conflict
    assert for_entry(None) is None


def test_an_entry_whose_caller_left_is_settled_but_not_answered(
    loop: asyncio.AbstractEventLoop,
) -> None:
    scheduler = Scheduler(1)
    gone, waiting = _queued(scheduler, loop, 2)
    assert gone.done is not None
    gone.done.cancel()
    scheduler.settle(scheduler.take(), [None, None])
    assert gone.state is State.DONE and gone.done.cancelled()
    assert waiting.done is not None and waiting.done.result() is None


def test_outcomes_of_a_failed_apply_are_its_exception_for_every_entry() -> None:
    group = [_entry(n) for n in range(3)]

    def fails(entries: Sequence[Entry]) -> list[Outcome]:
        raise StorageError("rolled back")

    outcomes = outcomes_of(group, fails)
    assert len(outcomes) == 3 and len({id(o) for o in outcomes}) == 1
    assert isinstance(outcomes[0], StorageError)
    assert outcomes_of(group, lambda entries: [None] * len(entries)) == [None] * 3


def test_an_apply_that_miscounts_fails_every_entry() -> None:
    group = [_entry(n) for n in range(3)]
    outcomes = outcomes_of(group, lambda entries: [None])
    assert all(isinstance(o, RuntimeError) for o in outcomes)


async def test_outcomes_of_async_catches_cancellation_too() -> None:
    group = [_entry(n) for n in range(2)]

    async def cancelled(entries: Sequence[Entry]) -> list[Outcome]:
        raise asyncio.CancelledError

    outcomes = await outcomes_of_async(group, cancelled)
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)

    async def applies(entries: Sequence[Entry]) -> list[Outcome]:
        await asyncio.sleep(0)
        return [None] * len(entries)

    assert await outcomes_of_async(group, applies) == [None, None]


def test_the_counters(loop: asyncio.AbstractEventLoop) -> None:
    scheduler = Scheduler(2)
    scheduler.count(_queued(scheduler, loop, 3))
    scheduler.count([_entry(9)])
    stats = scheduler.stats()
    assert (stats.transactions, stats.commits, stats.largest, stats.isolated) == (2, 4, 3, 0)


# ---------------------------------------------------------------------- a whole run


async def _drive(limit: int, bounds: Bounds, callers: int, seed: int) -> tuple[Scheduler, dict]:
    """The PostgreSQL way of driving a scheduler (lone commits in their caller's task,
    the rest in background sends), with a fake apply that fails some entries alone and
    some groups whole, and callers that sometimes give up while they wait."""
    rng = random.Random(seed)
    scheduler = Scheduler(limit, bounds)
    tasks: set[asyncio.Task[None]] = set()
    seen = {"most_sending": 0, "applied": [], "withdrawn": 0, "answers": 0}

    async def apply(group: Sequence[Entry]) -> list[Outcome]:
        seen["most_sending"] = max(seen["most_sending"], scheduler.sending)
        scheduler.count(group)
        assert all(entry.state is State.SENT for entry in group)
        await asyncio.sleep(rng.random() / 1000)
        if len(group) > 1 and rng.random() < 0.1:
            raise StorageError("the whole group rolled back")
        outcomes: list[Outcome] = []
        for entry in group:
            if rng.random() < 0.2:
                outcomes.append(ConflictError(entry.session_id))
            else:
                seen["applied"].append(entry.session_id)
                outcomes.append(None)
        return outcomes

    def kick() -> None:
        while scheduler.pending and scheduler.free():
            group = scheduler.take()
            scheduler.start(len(group))
            task = asyncio.ensure_future(flush(group))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def flush(group: list[Entry]) -> None:
        try:
            scheduler.settle(group, await outcomes_of_async(group, apply))
        finally:
            scheduler.finish(len(group))
            kick()

    async def caller(number: int) -> None:
        await asyncio.sleep(rng.random() / 500)
        entry = _entry(number)
        if scheduler.goes_alone(entry):
            try:
                outcome = (await outcomes_of_async([entry], apply))[0]
            finally:
                scheduler.finish_alone(entry)
                kick()
        else:
            done: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            scheduler.wait(entry, done)
            kick()
            if rng.random() < 0.1:
                done.cancel()
                if scheduler.withdraw(entry):
                    seen["withdrawn"] += 1
                return
            outcome = await done
        assert entry.state is State.DONE
        seen["answers"] += 1
        assert outcome is None or isinstance(outcome, StorageError)

    await asyncio.gather(*(caller(n) for n in range(callers)))
    while tasks:
        await asyncio.gather(*tasks)
    return scheduler, seen


@pytest.mark.parametrize("seed", range(5))
async def test_a_run_answers_every_caller_once_within_the_sends(seed: int) -> None:
    bounds = Bounds(commits=20, items=50, split_min=4)
    scheduler, seen = await _drive(limit=2, bounds=bounds, callers=300, seed=seed)
    assert seen["most_sending"] <= 2
    assert len(seen["applied"]) == len(set(seen["applied"])), "an entry applied twice"
    assert not scheduler.pending and scheduler.sending == 0 and scheduler.in_flight == 0
    assert scheduler.commits + seen["withdrawn"] == 300
    assert scheduler.largest <= 20

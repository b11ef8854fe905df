"""The bounded shield (``sessions._engine.shield.shielded``) on its own: every commit runs in it.

Each test drives real asyncio tasks and futures; none relies on timing except the
deadline tests, whose bounds are wide (a deadline of 0.05 s against work of 10 s).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sessions._engine.shield import DeadlineExceeded, Firm, _watch, shielded

pytestmark = pytest.mark.asyncio


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _on_cancel(waited: Awaitable[object], then: Callable[[], Awaitable[object]]) -> None:
    """Await ``waited``; cancelled, await ``then()`` and raise the cancellation on."""
    try:
        await waited
    except asyncio.CancelledError:
        await then()
        raise


async def _past_deadline(work: Awaitable[Any], **options: Any) -> DeadlineExceeded:
    """What ``shielded(work, **options)`` raises: it must be DeadlineExceeded."""
    with pytest.raises(DeadlineExceeded) as info:
        await shielded(work, **options)
    return info.value


async def test_returns_the_work_result_and_raises_its_error() -> None:
    async def ok() -> int:
        await asyncio.sleep(0)
        return 7

    async def bad() -> int:
        await asyncio.sleep(0)
        raise KeyError("boom")

    assert await shielded(ok(), timeout=None) == 7
    with pytest.raises(KeyError, match="boom"):
        await shielded(bad(), timeout=5)


async def test_work_that_never_suspends_runs_to_its_result() -> None:
    async def instant() -> str:
        return "done"

    assert await shielded(instant(), timeout=1) == "done"


async def test_a_cancelled_caller_waits_for_the_work_then_gets_its_cancellation() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def work() -> None:
        steps.append("started")
        await gate
        steps.append("after gate")
        await asyncio.sleep(0)
        steps.append("finished")

    caller = asyncio.ensure_future(shielded(work(), timeout=10))
    await _settle()
    for _ in range(3):  # repeated cancellations are held too
        caller.cancel()
        await _settle()
    assert not caller.done()
    assert not gate.cancelled()  # the work's own future was never cancelled
    gate.set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert steps == ["started", "after gate", "finished"]


async def test_the_cancellation_is_raised_chained_to_the_work_failure() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def work() -> None:
        await gate
        raise ValueError("after")

    caller = asyncio.ensure_future(shielded(work(), timeout=10))
    await _settle()
    caller.cancel()
    await _settle()
    gate.set_result(None)
    with pytest.raises(asyncio.CancelledError) as info:
        await caller
    # Python 3.10 raises a fresh CancelledError from a cancelled task, with the one its
    # coroutine raised as its __context__; later versions raise that one itself.
    raised: BaseException | None = info.value
    while raised is not None and not isinstance(raised.__cause__, ValueError):
        raised = raised.__context__
    assert raised is not None and isinstance(raised, asyncio.CancelledError)


async def test_a_deadline_cancels_the_work_and_raises_deadline_exceeded() -> None:
    seen: list[str] = []

    async def note() -> None:
        seen.append("cancelled")

    exceeded = await _past_deadline(_on_cancel(asyncio.sleep(10), note), timeout=0.05)
    assert exceeded.finished is True
    assert exceeded.timeout == 0.05
    assert seen == ["cancelled"]


async def test_work_outliving_its_grace_goes_on_in_the_background() -> None:
    release: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def cleanup() -> None:
        steps.append("cleanup started")
        await release  # a cleanup that takes longer than the grace
        steps.append("cleanup ended")

    work = _on_cancel(asyncio.sleep(10), cleanup)
    assert (await _past_deadline(work, timeout=0.02, grace=0.02)).finished is False
    assert steps == ["cleanup started"]
    release.set_result(None)
    await _settle()
    assert steps == ["cleanup started", "cleanup ended"]


async def test_work_reacting_to_the_deadline_with_an_outcome_reports_it() -> None:
    async def work() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "rolled back cleanly"
        return "never"

    assert await shielded(work(), timeout=0.02) == "rolled back cleanly"


async def test_a_cancelled_caller_past_the_deadline_gets_its_cancellation() -> None:
    async def work() -> None:
        await asyncio.sleep(10)

    caller = asyncio.ensure_future(shielded(work(), timeout=0.05))
    await _settle()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_a_timeout_around_it_still_raises_timeout_error_after_the_work() -> None:
    """``asyncio.timeout`` (Python 3.11+), else ``asyncio.wait_for`` (3.10's only way)."""
    steps: list[str] = []

    async def work() -> None:
        await asyncio.sleep(0.05)
        steps.append("finished")

    with pytest.raises((TimeoutError, asyncio.TimeoutError)):
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(0.01):
                await shielded(work(), timeout=10)
        else:
            await asyncio.wait_for(shielded(work(), timeout=10), 0.01)
    assert steps == ["finished"]


async def test_a_future_is_shielded_as_well_as_a_coroutine() -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    caller = asyncio.ensure_future(shielded(fut, timeout=10))
    await _settle()
    caller.cancel()
    await _settle()
    assert not fut.cancelled()
    fut.set_result(3)
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_work_cancelled_by_someone_else_raises_cancelled_error() -> None:
    inner: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def work() -> None:
        await inner

    caller = asyncio.ensure_future(shielded(work(), timeout=10))
    await _settle()
    inner.cancel()  # say, the loop shutting down cancels what the work waits on
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_the_work_sees_the_callers_context_variables() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")

    async def work() -> str:
        await asyncio.sleep(0)
        return var.get()

    assert await shielded(work(), timeout=1) == "caller"


async def test_many_callers_cancelled_together_all_finish_their_work() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    finished: list[int] = []

    async def work(n: int) -> None:
        await gate
        await asyncio.sleep(0)
        finished.append(n)

    callers = [asyncio.ensure_future(shielded(work(n), timeout=10)) for n in range(20)]
    await _settle()
    for caller in callers:
        caller.cancel()
    await _settle()
    gate.set_result(None)
    outcomes: list[Any] = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
    assert sorted(finished) == list(range(20))


async def test_context_variables_the_work_sets_stay_its_own() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var2", default="unset")

    async def work() -> str:
        var.set("work")
        await asyncio.sleep(0)
        return var.get()

    assert await shielded(work(), timeout=1) == "work"
    assert var.get() == "unset"


# ------------------------------------------------------------ Firm futures (our own waits)


def _firm() -> Firm[int]:
    return Firm(loop=asyncio.get_running_loop())


async def test_a_firm_future_refuses_the_callers_cancel_until_the_work_has_its_result() -> None:
    firm = _firm()
    got: list[int] = []

    async def work() -> None:
        got.append(await firm)

    caller = asyncio.ensure_future(shielded(work(), timeout=10))
    await _settle()
    for _ in range(3):  # refused while the shield holds it, each time
        caller.cancel()
        await _settle()
    assert not firm.cancelled()
    assert not caller.done()
    firm.set_result(5)
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert got == [5]


async def test_a_shielded_caller_resumes_in_the_loop_turn_a_direct_await_would() -> None:
    """No proxy in between: the caller is stepped from the future's own callback (a
    future of ours or not), in the turn after the result is set, as a direct await is."""
    for make in (_firm, lambda: asyncio.get_running_loop().create_future()):
        for shield in (True, False):
            waited = make()
            caller = asyncio.ensure_future(shielded(waited, timeout=10) if shield else waited)
            await _settle()
            waited.set_result(1)
            await asyncio.sleep(0)  # one turn: the caller's wake-up was queued before ours
            assert caller.done(), (make, shield)
            assert await caller == 1


async def test_a_deadline_releases_a_firm_future_and_cancels_the_work_waiting_on_it() -> None:
    firm = _firm()
    seen: list[str] = []

    async def note() -> None:
        seen.append("cancelled")

    assert (await _past_deadline(_on_cancel(firm, note), timeout=0.05)).finished is True
    assert firm.cancelled()
    assert seen == ["cancelled"]


async def test_a_caller_cancelled_in_a_firm_wait_is_released_at_the_deadline() -> None:
    firm = _firm()

    async def work() -> None:
        await firm

    caller = asyncio.ensure_future(shielded(work(), timeout=0.05))
    await _settle()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert firm.cancelled()  # released at the deadline, then cancelled


async def test_a_firm_future_outside_a_shield_is_cancelled_like_any_future() -> None:
    firm = _firm()
    waiter = asyncio.ensure_future(firm)
    await _settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert firm.cancelled()


# ------------------------------------------------------------ deadlines share one timer


async def test_a_shorter_deadline_set_after_a_longer_one_still_fires_on_time() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def slow() -> None:
        await asyncio.sleep(10)

    long = asyncio.ensure_future(shielded(gate, timeout=30))
    await _settle()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DeadlineExceeded):
        await shielded(slow(), timeout=0.05)
    assert loop.time() - started < 5  # not held until the 30 s deadline
    gate.set_result(None)
    await long


async def test_finished_works_leave_no_deadline_behind() -> None:
    async def quick(n: int) -> int:
        await asyncio.sleep(0)
        return n

    assert await asyncio.gather(*(shielded(quick(n), timeout=5) for n in range(50))) == list(
        range(50)
    )
    assert _watch(asyncio.get_running_loop()).clocks == {}


@pytest.mark.timeout(20)  # a lost wake-up hangs the caller
async def test_a_callback_added_to_what_the_caller_waits_on_keeps_its_wake_up() -> None:
    """Whatever reaches the relay the caller's task waits on (``Task._fut_waiter``) and
    adds a callback gets it called, and the task still wakes."""
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    caller = asyncio.ensure_future(shielded(fut, timeout=10))
    await _settle()
    waited = caller._fut_waiter  # type: ignore[attr-defined]
    seen: list[object] = []
    waited.add_done_callback(seen.append)
    fut.set_result(4)
    assert await caller == 4
    await _settle()
    assert seen == [waited]

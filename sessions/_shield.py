"""A bounded shield: finish short, critical work even if the caller is cancelled.

AnyIO's doctrine (``move_on_after(..., shield=True)``): shield only work that is
bounded, and always re-raise the caller's cancellation. :func:`shielded` runs the work
in a task of its own and holds the caller's cancellations (however often they are
repeated) until the work ends, but never past a deadline. At the deadline the work is
cancelled and given a short grace period to clean up; then the caller is released
whatever the work is doing: with its ``CancelledError`` if it was cancelled (so
``asyncio.timeout`` and task groups still see it), else with :class:`DeadlineExceeded`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["GRACE", "DeadlineExceeded", "shielded"]

T = TypeVar("T")

#: Seconds the work gets to react to its cancellation at the deadline before the caller
#: is released anyway (the work then goes on in the background until it ends).
GRACE = 0.25


class DeadlineExceeded(Exception):
    """The shielded work did not finish within its time bound (the caller was not cancelled).

    ``finished`` tells whether the work stopped (cancelled) during the grace period or is
    still running in the background.
    """

    def __init__(self, timeout: float, *, finished: bool) -> None:
        super().__init__(f"did not finish within {timeout:g}s")
        self.timeout = timeout
        self.finished = finished


class _Waiting:
    """The caller's current waiter, which the work wakes itself as it ends (one loop
    iteration sooner than a done callback of its task would)."""

    __slots__ = ("waiter",)

    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None

    def wake(self, _: object = None) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def _run(work: Awaitable[T], waiting: _Waiting) -> T:
    try:
        return await work
    finally:
        waiting.wake()


async def _wait(
    task: asyncio.Future[T], waiting: _Waiting, until: float | None
) -> asyncio.CancelledError | None:
    """Wait for ``task`` until loop time ``until``; the caller's first cancellation, if any.

    One future and one timer per wait, nothing else (``asyncio.wait`` makes sets and
    more callbacks): this runs for every commit. The task's done callback also wakes the
    caller, for a task that ends without running its work (cancelled before it started)."""
    loop = asyncio.get_running_loop()
    cancelled: asyncio.CancelledError | None = None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        waiting.wake()

    while not task.done() and not expired:
        if until is not None and until <= loop.time():
            break
        waiter = waiting.waiter = loop.create_future()
        task.add_done_callback(waiting.wake)
        timer = None if until is None else loop.call_at(until, expire)
        try:
            await waiter
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
        finally:
            waiting.waiter = None
            task.remove_done_callback(waiting.wake)
            if timer is not None:
                timer.cancel()
    return cancelled


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise


async def shielded(work: Awaitable[T], *, timeout: float | None, grace: float = GRACE) -> T:
    """Run ``work`` to its outcome despite the caller's cancellation, for at most ``timeout`` s.

    Returns the work's result or raises its exception. If the caller was cancelled
    meanwhile, the first ``CancelledError`` is raised instead (chained to the work's
    failure, if any). If the deadline passes, the work is cancelled; if it ends within
    ``grace`` seconds with a result or an error of its own, that is the outcome, else the
    caller gets its ``CancelledError`` or :class:`DeadlineExceeded`.
    ``timeout=None`` waits as long as the work takes.
    """
    loop = asyncio.get_running_loop()
    waiting = _Waiting()
    task = loop.create_task(_run(work, waiting))
    deadline = None if timeout is None else loop.time() + timeout
    cancelled = await _wait(task, waiting, deadline)
    if not task.done():
        task.cancel()
        again = await _wait(task, waiting, loop.time() + grace)
        cancelled = cancelled or again
        if not task.done() or task.cancelled():
            finished = task.done()
            if not finished:
                task.add_done_callback(_consume)
            if cancelled is not None:
                raise cancelled
            assert timeout is not None
            raise DeadlineExceeded(timeout, finished=finished)
        # The work reacted to its cancellation with an outcome of its own: report that.
    if task.cancelled():  # someone else cancelled the work itself (say, loop shutdown)
        raise cancelled or asyncio.CancelledError()
    failure = task.exception()
    if cancelled is not None:
        raise cancelled from failure
    if failure is not None:
        raise failure
    return task.result()

"""A bounded shield: finish short, critical work even if the caller is cancelled.

AnyIO's doctrine (``move_on_after(..., shield=True)``): shield only work that is
bounded, and always re-raise the caller's cancellation. :func:`shielded` runs the work
in the caller's own task, step by step, and holds the caller's cancellations (however
often they are repeated) until the work ends, but never past a deadline. At the deadline the work is
cancelled and given a short grace period to clean up; then the caller is released
whatever the work is doing: with its ``CancelledError`` if it was cancelled (so
``asyncio.timeout`` and task groups still see it), else with :class:`DeadlineExceeded`.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Awaitable, Generator
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


def _wake(proxy: asyncio.Future[None]) -> None:
    if not proxy.done():
        proxy.set_result(None)


class _Wake:
    """Done callback of the future the work waits on: wakes the caller's current proxy."""

    __slots__ = ("proxy",)

    def __init__(self, proxy: asyncio.Future[None]) -> None:
        self.proxy = proxy

    def __call__(self, _: object = None) -> None:
        _wake(self.proxy)


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise


def _advance(
    steps: Generator[Any, Any, Any], context: contextvars.Context, error: BaseException | None
) -> Any:
    """One step of the work, in its context: what it waits on next (or StopIteration)."""
    if error is not None:
        return context.run(steps.throw, error)
    return context.run(steps.send, None)


@types.coroutine
def _resume(
    steps: Generator[Any, Any, T], waited: Any, context: contextvars.Context
) -> Generator[Any, Any, T]:
    """The rest of a work left to run on its own (past its deadline and grace), in a task
    of its own: no shield any more, its waits go straight to that task."""
    error: BaseException | None = None
    while True:
        if waited is not None:
            waited._asyncio_future_blocking = True
            try:
                if not waited.done():
                    yield waited
            except BaseException as exc:  # noqa: BLE001 - handed to the work, as a task would
                error = exc
        elif error is None:
            yield None
        try:
            waited = _advance(steps, context, error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        error = None


class _Clock:
    """The deadline of one shielded work: one timer for the whole work (not one per
    wait), which wakes whatever proxy the caller waits on when it expires."""

    __slots__ = ("expired", "proxy", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float | None) -> None:
        self.expired = False
        self.proxy: asyncio.Future[None] | None = None
        self.timer = None if timeout is None else loop.call_later(timeout, self.expire)

    def expire(self) -> None:
        self.expired = True
        if self.proxy is not None:
            _wake(self.proxy)

    def restart(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.stop()
        self.expired = False
        self.timer = loop.call_later(seconds, self.expire)

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@types.coroutine
def _drive(work: Awaitable[T], timeout: float | None, grace: float) -> Generator[Any, Any, T]:
    """Run ``work`` step by step inside the calling task (no task of its own).

    The calling task never waits on what the work waits on: it waits on a private
    proxy future that the work's future (or the deadline) completes, so a cancellation
    of the caller cancels only the proxy. It is noted, and the work goes on. This costs
    a future and a callback per suspension of the work, where a task of its own costs a
    task, a waiter and two more turns of the event loop per call.
    """
    loop = asyncio.get_running_loop()
    steps = work.__await__()
    context = contextvars.copy_context()  # the work's own, as a task of its own would have
    clock = _Clock(loop, timeout)
    try:
        return (yield from _steps(loop, steps, context, clock, timeout, grace))
    finally:
        clock.stop()


def _wait(
    loop: asyncio.AbstractEventLoop, waited: Any, clock: _Clock
) -> Generator[Any, Any, asyncio.CancelledError | None]:
    """Make the calling task wait until ``waited`` is done (``None``: one turn of the
    loop) or the clock expires, through proxies; the caller's first cancellation, if any."""
    cancelled: asyncio.CancelledError | None = None
    while not clock.expired and not (waited is not None and waited.done()):
        proxy = clock.proxy = loop.create_future()
        proxy._asyncio_future_blocking = True
        wake = None
        if waited is not None:
            wake = _Wake(proxy)
            waited.add_done_callback(wake)
        else:
            loop.call_soon(_wake, proxy)
        try:
            yield proxy
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
        finally:
            clock.proxy = None
            if wake is not None:
                waited.remove_done_callback(wake)
        if waited is None:
            break  # its turn of the loop is over
    return cancelled


def _steps(
    loop: asyncio.AbstractEventLoop,
    steps: Generator[Any, Any, T],
    context: contextvars.Context,
    clock: _Clock,
    timeout: float | None,
    grace: float,
) -> Generator[Any, Any, T]:
    cancelled: asyncio.CancelledError | None = None
    in_grace = False
    error: BaseException | None = None  # to throw into the work at its next step
    while True:
        try:
            waited = _advance(steps, context, error)
        except StopIteration as stop:
            if cancelled is not None:
                raise cancelled from None
            return stop.value  # type: ignore[no-any-return]
        except asyncio.CancelledError as exc:
            if in_grace:  # the work stopped on the deadline's cancellation
                if cancelled is not None:
                    raise cancelled from None
                assert timeout is not None
                raise DeadlineExceeded(timeout, finished=True) from None
            raise cancelled or exc from None  # cancelled by someone else (say, shutdown)
        except BaseException as failure:
            if cancelled is not None:
                raise cancelled from failure
            raise
        error = None
        if waited is not None:
            if getattr(waited, "_asyncio_future_blocking", None) is not True:
                error = RuntimeError(f"bad yield in shielded work: {waited!r}")  # as a Task says
                continue
            waited._asyncio_future_blocking = False  # taken, as a Task takes it
        # The work waits on ``waited`` (a future, or None: one turn of the loop).
        caught = yield from _wait(loop, waited, clock)
        if cancelled is None:
            cancelled = caught
        if not clock.expired or (waited is not None and waited.done()):
            continue
        if not in_grace:
            # Out of time: cancel the work (as cancelling its task would) and give it
            # ``grace`` seconds to end with an outcome of its own.
            in_grace = True
            clock.restart(loop, grace)
            if waited is not None:
                waited.cancel()
            error = asyncio.CancelledError()
            continue
        # Out of grace too: the work goes on in the background; the caller is released.
        rest = loop.create_task(_resume(steps, waited, context))
        rest.add_done_callback(_consume)
        if cancelled is not None:
            raise cancelled
        assert timeout is not None
        raise DeadlineExceeded(timeout, finished=False)


async def shielded(work: Awaitable[T], *, timeout: float | None, grace: float = GRACE) -> T:
    """Run ``work`` to its outcome despite the caller's cancellation, for at most ``timeout`` s.

    Returns the work's result or raises its exception. If the caller was cancelled
    meanwhile, the first ``CancelledError`` is raised instead (chained to the work's
    failure, if any). If the deadline passes, the work is cancelled; if it ends within
    ``grace`` seconds with a result or an error of its own, that is the outcome, else the
    caller gets its ``CancelledError`` or :class:`DeadlineExceeded` (and the work goes
    on in a task of its own until it ends). ``timeout=None`` waits as long as the work
    takes. The work runs in the caller's task and context (see :func:`_drive`).
    """
    return await _drive(work, timeout, grace)

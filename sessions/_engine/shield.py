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
import weakref
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["GRACE", "DeadlineExceeded", "Firm", "drive", "shielded"]

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


class Firm(asyncio.Future[T]):
    """A future of ours that shielded work waits on (a commit's outcome): the shield
    makes the caller wait on it directly (no :class:`_Relay` in between).

    While the shield waits on it, ``cancel()`` is refused and noted: asyncio's
    ``Task.cancel()`` then cancels the task itself as soon as the future is done, which
    the shield takes as the caller's cancellation (held, like any other). Anywhere
    else (awaited outside a shield, or by work left to run past its deadline) it is a
    plain future.
    """

    _held = False
    _asked = False

    def cancel(self, msg: Any = None) -> bool:
        if self._held:
            self._asked = True
            return False
        return super().cancel(msg)


class _Relay:
    """What the caller's task waits on while the work waits on a future not of ours
    (asyncpg's, a sleep's): to the task a future that refuses cancellation (as a held
    :class:`Firm` does; the task keeps the request) and that steps the task as soon as
    the work's future is done, in that future's own callback. A proxy future would take
    one more turn of the loop per wait. The clock fires it at the deadline (the task
    then finds the clock expired)."""

    __slots__ = ("_asyncio_future_blocking", "_callbacks", "_loop", "fired")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._asyncio_future_blocking = True
        # The task's wake-up (and anything else added, as a future would keep it).
        self._callbacks: list[tuple[Callable[[Any], object], contextvars.Context | None]] = []
        self.fired = False

    # What asyncio's Task asks of what it waits on.
    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def add_done_callback(
        self, fn: Callable[[Any], object], *, context: contextvars.Context | None = None
    ) -> None:
        if self.fired:
            self._loop.call_soon(fn, self, context=context)
        else:
            self._callbacks.append((fn, context))

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        kept = [(f, c) for f, c in self._callbacks if f != fn]
        removed = len(self._callbacks) - len(kept)
        self._callbacks = kept
        return removed

    def cancel(self, msg: Any = None) -> bool:
        return False  # refused: the task then takes its cancellation when this fires

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return self.fired

    def result(self) -> None:
        return None

    def exception(self) -> None:
        return None

    def fire(self, _: object = None) -> None:
        """Step the waiting task now (the work's future is done, or the clock expired):
        its wake-up runs here, not a turn of the loop later; any other callback is
        scheduled as a future schedules it."""
        if self.fired:
            return
        self.fired = True
        callbacks, self._callbacks = self._callbacks, []
        for index, (callback, context) in enumerate(callbacks):
            if index:
                self._loop.call_soon(callback, self, context=context)
            elif context is None:
                callback(self)
            else:
                context.run(callback, self)


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


async def _rest(steps: Generator[Any, Any, T], waited: Any, context: contextvars.Context) -> T:
    """:func:`_resume` as a coroutine: what ``create_task`` takes (from Python 3.12 on,
    a generator-based coroutine is refused there)."""
    return await _resume(steps, waited, context)


class _Watch:
    """The deadlines of one event loop's shielded works, behind one timer.

    A work's deadline is a dict entry, not a timer of its own: nearly every work ends
    long before it, and a timer per work costs a handle, a heap push and a cancel
    (and a heap that fills with cancelled handles under load). The one timer is armed
    for the earliest deadline it knows of; when it fires, it expires the works that
    are past theirs and is armed again for the earliest of the rest.
    """

    __slots__ = ("clocks", "due", "loop", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop: Callable[[], asyncio.AbstractEventLoop | None]
        try:
            self.loop = weakref.ref(loop)  # the registry's key: its value must not keep it
        except TypeError:  # a loop without weak references (its watch is not kept)
            self.loop = lambda: loop
        self.clocks: dict[_Clock, float] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.due = float("inf")

    def add(self, loop: asyncio.AbstractEventLoop, clock: _Clock, when: float) -> None:
        """Expire ``clock`` at ``when`` (the loop's time; past already: at once)."""
        self.clocks[clock] = when
        if when < self.due:
            self._arm(loop, when)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.due = when
        self.timer = loop.call_at(when, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timer, self.due = None, float("inf")
        now = loop.time()
        late = [clock for clock, when in self.clocks.items() if when <= now]
        for clock in late:
            del self.clocks[clock]
            clock.expire()
        if self.clocks:
            self._arm(loop, min(self.clocks.values()))


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()
_last: _Watch | None = None  # the last loop's: one lookup fewer per work


def _watch(loop: asyncio.AbstractEventLoop) -> _Watch:
    global _last
    watch = _last
    if watch is None or watch.loop() is not loop:
        try:
            watch = _watches.get(loop)
            if watch is None:
                watch = _watches[loop] = _Watch(loop)
        except TypeError:  # a loop without weak references: a watch for this work only
            return _Watch(loop)
        _last = watch
    return watch


class _Clock:
    """The deadline of one shielded work (an entry of its loop's :class:`_Watch`; a
    timer of its own only for the grace period), which wakes whatever the caller
    waits on when it expires: its relay (fired), or a :class:`Firm` future (released,
    then cancelled, as cancelling the work's task at its deadline would)."""

    __slots__ = ("expired", "firm", "relay", "released", "timer", "watch")

    def __init__(self, loop: asyncio.AbstractEventLoop, due: float | None) -> None:
        """A clock expiring at ``due`` (the loop's time; ``None``: never)."""
        self.expired = False
        self.relay: _Relay | None = None
        self.firm: Firm[Any] | None = None
        self.released: Firm[Any] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.watch: _Watch | None = None
        if due is not None:
            self.watch = _watch(loop)
            self.watch.add(loop, self, due)

    def expire(self) -> None:
        self.watch = None
        self.expired = True
        if self.relay is not None:
            self.relay.fire()
        firm = self.firm
        if firm is not None:
            firm._held = False
            self.released = firm
            firm.cancel()

    def restart(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.stop()
        self.expired = False
        self.timer = loop.call_later(seconds, self.expire)

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.clocks.pop(self, None)
            self.watch = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


@types.coroutine
def drive(
    work: Awaitable[T], timeout: float | None, grace: float = GRACE
) -> Generator[Any, Any, T]:
    """Run ``work`` step by step inside the calling task (no task of its own).

    The calling task never waits on what the work waits on, so a cancellation of the
    caller never reaches the work: it waits on a :class:`_Relay` that refuses the
    cancellation (noted; asyncio's Task then delivers it when the relay fires, and it
    is held until the work ends) and that steps the task from the work's future's own
    done callback, or, for a :class:`Firm` future of ours, on that future itself (held
    the same way). Either costs no more turns of the loop than awaiting the future
    directly, where a task of its own costs a task, a waiter and two more turns.
    """
    loop = asyncio.get_running_loop()
    steps = work.__await__()
    context = contextvars.copy_context()  # the work's own, as a task of its own would have
    due = None if timeout is None else loop.time() + timeout
    try:  # the first step: a work that never waits ends here, with no clock to keep
        waited = context.run(steps.send, None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except asyncio.CancelledError as exc:
        raise exc from None  # as a later step's (_steps)
    clock = _Clock(loop, due)  # deadline from the call on: a past one expires at once
    try:
        return (yield from _steps(loop, steps, context, clock, timeout, grace, waited))
    finally:
        clock.stop()


def _wait(
    loop: asyncio.AbstractEventLoop, waited: Any, clock: _Clock
) -> Generator[Any, Any, asyncio.CancelledError | None]:
    """Make the calling task wait until ``waited`` is done (``None``: one turn of the
    loop) or the clock expires; the caller's first cancellation, if any."""
    cancelled: asyncio.CancelledError | None = None
    if waited.__class__ is Firm:
        while not clock.expired and not waited.done():
            waited._held = True
            waited._asyncio_future_blocking = True
            clock.firm = waited
            try:
                yield waited
            except asyncio.CancelledError as exc:
                # Ours if refused while held (the task took it once the future was
                # done); else the clock released and cancelled the future.
                if cancelled is None and waited._asked:
                    cancelled = exc
            finally:
                waited._held = False
                clock.firm = None
        return cancelled
    while not clock.expired and not (waited is not None and waited.done()):
        relay = clock.relay = _Relay(loop)
        if waited is not None:
            waited.add_done_callback(relay.fire)
        else:
            loop.call_soon(relay.fire)
        try:
            yield relay
        except asyncio.CancelledError as exc:  # refused, then taken once the relay fired
            if cancelled is None:
                cancelled = exc
        finally:
            clock.relay = None
            if waited is not None and not relay.fired:
                waited.remove_done_callback(relay.fire)
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
    waited: Any,
) -> Generator[Any, Any, T]:
    """The work's steps after its first, which yielded ``waited``."""
    cancelled: asyncio.CancelledError | None = None
    in_grace = False
    while True:
        error: BaseException | None = None  # to throw into the work at its next step
        if waited is not None and getattr(waited, "_asyncio_future_blocking", None) is not True:
            error = RuntimeError(f"bad yield in shielded work: {waited!r}")  # as a Task says
        else:
            if waited is not None:
                waited._asyncio_future_blocking = False  # taken, as a Task takes it
            # The work waits on ``waited`` (a future, or None: one turn of the loop).
            caught = yield from _wait(loop, waited, clock)
            if cancelled is None:
                cancelled = caught
            if clock.expired and not (
                waited is not None and waited.done() and waited is not clock.released
            ):
                if in_grace:
                    # Out of grace too: the work goes on in the background; the caller
                    # is released.
                    rest = loop.create_task(_rest(steps, waited, context))
                    rest.add_done_callback(_consume)
                    if cancelled is not None:
                        raise cancelled
                    assert timeout is not None
                    raise DeadlineExceeded(timeout, finished=False)
                # Out of time: cancel the work (as cancelling its task would) and give it
                # ``grace`` seconds to end with an outcome of its own.
                in_grace = True
                clock.restart(loop, grace)
                if waited is not None:
                    waited.cancel()
                error = asyncio.CancelledError()
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


async def shielded(work: Awaitable[T], *, timeout: float | None, grace: float = GRACE) -> T:
    """Run ``work`` to its outcome despite the caller's cancellation, for at most ``timeout`` s.

    Returns the work's result or raises its exception. If the caller was cancelled
    meanwhile, the first ``CancelledError`` is raised instead (chained to the work's
    failure, if any). If the deadline passes, the work is cancelled; if it ends within
    ``grace`` seconds with a result or an error of its own, that is the outcome, else the
    caller gets its ``CancelledError`` or :class:`DeadlineExceeded` (and the work goes
    on in a task of its own until it ends). ``timeout=None`` waits as long as the work
    takes. The work runs in the caller's task and context (see :func:`drive`).
    """
    return await drive(work, timeout, grace)

"""A pass-through backend that can hold a call at a chosen point, and the cancel driver.

``GatedBackend`` numbers every backend call (``load`` / ``apply`` / ``applied``) of
an operation. A ``Point`` names where the caller is cancelled:

* ``("step", k)``: after ``k`` event-loop iterations of the operation (``k = 0``:
  before it ever runs). A database call in flight counts as one iteration, so the
  points do not depend on how fast the database thread is.
* ``("gate", j, phase)``: at call ``j``, ``before`` it reaches the database,
  ``during`` it (sent, not answered) or ``after`` it answered but before the core
  saw the answer.

``Mode`` is how: one ``cancel()``, ``cancel()`` twice, or an ``asyncio.timeout``
expiring there.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sessions import Batch, BufferedSession, RetryPolicy, Store
from sessions.errors import StorageError, TransientStorageError

PHASES = ("before", "during", "after")
MODES = (
    ("cancel", "cancel-twice", "timeout")
    if sys.version_info >= (3, 11)
    else (
        "cancel",
        "cancel-twice",
    )
)

Point = tuple[Any, ...]


class GatedBackend:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.atomic: bool = inner.atomic
        self.idempotent: bool = inner.idempotent
        self.calls: list[str] = []
        self.pause: tuple[int, str] | None = None
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.in_flight = 0
        self.in_flight_calls: list[str] = []  # names of the calls in flight right now
        self.idle = asyncio.Event()
        self.idle.set()
        # What the database calls ran into (kept across operations, for the soak):
        self.interrupted_commits = 0  # cancellations that landed while apply was in flight
        self.failed_applies: list[TransientStorageError] = []  # attempts that failed
        # Fault injection (the real call still runs first):
        self.lose_ack = 0  # apply succeeds, then raises "outcome unknown" this many times
        self.fail_applied = 0  # applied() fails this many times

    def reset(self) -> None:
        self.calls.clear()
        self.pause = None
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def _hold(self, index: int, phase: str) -> None:
        if self.pause == (index, phase):
            self.reached.set()
            await self.release.wait()

    async def _call(self, name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        index = len(self.calls)
        self.calls.append(name)
        await self._hold(index, "before")
        if self.pause == (index, "during"):
            self.reached.set()
        self.in_flight += 1
        self.in_flight_calls.append(name)
        self.idle.clear()
        try:
            result = await fn()
        except TransientStorageError as exc:
            if name == "apply":
                self.failed_applies.append(exc)
            raise
        finally:
            self.in_flight -= 1
            self.in_flight_calls.remove(name)
            if not self.in_flight:
                self.idle.set()
        await self._hold(index, "after")
        return result

    async def load(self, session_id: str, limit: int | None) -> Any:
        return await self._call("load", lambda: self.inner.load(session_id, limit))

    async def apply(self, session_id: str, batches: Sequence[Batch]) -> None:
        async def run() -> None:
            await self.inner.apply(session_id, batches)
            if self.lose_ack > 0:
                self.lose_ack -= 1
                raise TransientStorageError(
                    "injected: committed, but the acknowledgement was lost", outcome_known=False
                )

        await self._call("apply", run)

    async def applied(self, session_id: str, batch_ids: Sequence[str]) -> Any:
        async def run() -> Any:
            if self.fail_applied > 0:
                self.fail_applied -= 1
                raise StorageError("injected: cannot reach the database to check")
            return await self.inner.applied(session_id, batch_ids)

        return await self._call("applied", run)

    async def close(self) -> None:
        """The real backend belongs to the real store; closing the proxy keeps it."""


class GatedStore(Store[BufferedSession]):
    session_class = BufferedSession

    def __init__(self, inner: Store[Any], *, retry: RetryPolicy | None = None) -> None:
        self.gate = GatedBackend(inner.backend)
        super().__init__(self.gate, retry=retry or inner.retry)


@dataclass
class Outcome:
    point: Point
    mode: str
    started: bool = False
    completed: bool = False  # returned normally
    result: Any = None
    cancelled: bool = False  # CancelledError reached the caller
    timed_out: bool = False  # TimeoutError reached the caller
    error: BaseException | None = None  # any other exception
    cancel_sent: bool = False
    commit_in_flight: bool = False  # a Backend.apply was running when it was interrupted
    reached: bool = True  # the gate point was reached (always True for steps)

    @property
    def interrupted(self) -> bool:
        return self.cancelled or self.timed_out

    def describe(self) -> str:
        how = (
            "returned"
            if self.completed
            else "cancelled"
            if self.cancelled
            else "timed out"
            if self.timed_out
            else f"raised {type(self.error).__name__}: {self.error}"
        )
        return f"{self.mode} at {self.point}: {how}"


async def run_interrupted(
    gate: GatedBackend, op: Callable[[], Awaitable[Any]], point: Point, mode: str
) -> Outcome:
    """Run ``op`` as a task and interrupt it at ``point`` the ``mode`` way."""
    loop = asyncio.get_running_loop()
    out = Outcome(point, mode)
    timeouts: list[asyncio.Timeout] = []  # type: ignore[name-defined,unused-ignore]

    async def body() -> Any:
        out.started = True
        if mode == "timeout":
            async with asyncio.timeout(None) as cm:  # type: ignore[attr-defined,unused-ignore]
                timeouts.append(cm)
                return await op()
        return await op()

    gate.reset()
    if point[0] == "gate":
        gate.pause = (point[1], point[2])
    task = asyncio.ensure_future(body())

    if point[0] == "step":
        for _ in range(point[1]):
            if task.done():
                break
            if gate.in_flight:
                await gate.idle.wait()
            else:
                await asyncio.sleep(0)
    else:
        waiter = asyncio.ensure_future(gate.reached.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            waiter.cancel()
            out.reached = False

    if not task.done():
        out.cancel_sent = True
        out.commit_in_flight = "apply" in gate.in_flight_calls
        gate.interrupted_commits += out.commit_in_flight
        if mode == "timeout" and timeouts:
            timeouts[0].reschedule(loop.time())
        else:
            task.cancel()
            if mode == "cancel-twice":
                await asyncio.sleep(0)
                if not task.done():
                    task.cancel()
    gate.release.set()
    try:
        out.result = await task
        out.completed = True
    except asyncio.CancelledError:
        out.cancelled = True
    except TimeoutError:
        out.timed_out = True
    except Exception as exc:  # noqa: BLE001 - recorded and judged by the caller
        out.error = exc
    gate.pause = None
    return out


MAX_STEPS = 400


async def sweep(
    gate: GatedBackend,
    make: Callable[[], Awaitable[Callable[[], Awaitable[Any]]]],
    judge: Callable[[Outcome], Awaitable[list[str]]],
    *,
    modes: Sequence[str] = MODES,
) -> tuple[int, list[str]]:
    """Interrupt the operation ``make()`` prepares at every point, in every mode.

    ``make`` prepares a fresh session and returns the operation; ``judge`` checks the
    outcome (and that the session still works) and returns violations. Returns
    ``(scenarios run, violations)``.
    """
    tries = 0
    problems: list[str] = []
    for mode in modes:
        # Event-loop steps: k = 0, 1, 2, ... until the operation finishes first.
        for k in range(MAX_STEPS):
            op = await make()
            out = await run_interrupted(gate, op, ("step", k), mode)
            tries += out.cancel_sent
            problems += [f"{out.describe()}: {p}" for p in await judge(out)]
            if not out.cancel_sent:
                break
        else:
            problems.append(f"{mode}: operation still running after {MAX_STEPS} steps")
        # Database calls: before / during / after each one, until there is no call j.
        j = 0
        while j < 50:
            reached_any = False
            for phase in PHASES:
                op = await make()
                out = await run_interrupted(gate, op, ("gate", j, phase), mode)
                tries += out.cancel_sent
                problems += [f"{out.describe()}: {p}" for p in await judge(out)]
                reached_any = reached_any or out.reached
            if not reached_any:
                break
            j += 1
    return tries, problems

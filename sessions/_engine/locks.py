"""A lock that tasks of different event loops (in different threads) can share.

``asyncio.Lock`` belongs to the loop it is first used on: a task of another loop gets
"is bound to a different event loop", or waits for a wake-up that is delivered to the
wrong loop and never comes. A session object shared by threads that each run an event
loop of their own (a sync web framework calling ``Runner.run_sync`` from a thread pool)
needs its operations serialized across those loops, so its lock is this one.

Fair (first come, first served), not reentrant. A waiter is woken on its own loop
(``call_soon_threadsafe``); the lock is handed to it directly, so nobody can overtake
it. A waiter cancelled after the lock was handed to it passes the lock on; a waiter
whose loop has closed meanwhile is skipped.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

__all__ = ["CrossLoopLock"]


class _Waiter:
    __slots__ = ("future", "state")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        #: "waiting" (queued), "granted" (the lock is its own), "skipped" (its loop closed)
        self.state = "waiting"


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class CrossLoopLock:
    """A fair mutual-exclusion lock for tasks of any event loop in any thread."""

    __slots__ = ("_locked", "_mutex", "_waiters")

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locked = False
        self._waiters: deque[_Waiter] = deque()

    def locked(self) -> bool:
        return self._locked

    def take(self) -> bool:
        """Take the lock if it is free, without waiting; ``False`` if it is held (then
        :meth:`acquire` waits for it). What a commit tries first: no coroutine."""
        with self._mutex:
            if self._locked:
                return False
            self._locked = True
            return True

    async def acquire(self) -> None:
        with self._mutex:
            if not self._locked:
                self._locked = True
                return
            waiter = _Waiter(asyncio.get_running_loop().create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            with self._mutex:
                state = waiter.state
                if state == "waiting":
                    self._waiters.remove(waiter)
            if state == "granted":  # handed to us just as we were cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        """Hand the lock to the next waiter (on its own loop), or unlock it."""
        with self._mutex:
            if not self._locked:
                raise RuntimeError("CrossLoopLock.release(): the lock is not held")
            while self._waiters:
                waiter = self._waiters.popleft()
                try:
                    waiter.future.get_loop().call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:  # its event loop is closed: nobody is waiting there
                    waiter.state = "skipped"
                    continue
                waiter.state = "granted"
                return
            self._locked = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

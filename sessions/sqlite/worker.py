"""A thread that owns one ``sqlite3`` connection and runs jobs on it, one at a time.

Why our own and not aiosqlite: aiosqlite's public API is one thread hop per statement
(``execute``, ``commit``, ...). A commit would then be several hops, each a point where
the transaction sits open between two statements, and several times slower. Running a
whole transaction as a single call needs aiosqlite's private ``_execute`` / ``_tx`` /
``_thread``, which changed between releases: 0.20 has no ``_thread``, and 0.22.0 changed
what its queue holds, so a job queued the old way killed the worker and the next commit
waited forever. This worker is the small part of aiosqlite we need, under our control:

* one daemon thread per connection (a store that is never closed does not keep the
  interpreter from exiting; SQLite rolls back whatever a killed process left open);
* jobs run start to finish in that thread, so a transaction is one job: a cancelled
  caller can neither interrupt it halfway nor leave it open;
* results go back to the event loop of each caller (``call_soon_threadsafe``);
* a stopped or dead thread is an error for every queued and later job, never a wait.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from ..errors import StorageError

__all__ = ["Call", "Job", "Worker", "WorkerStoppedError", "call_in_loop", "deliver"]

logger = logging.getLogger("sessions")

T = TypeVar("T")


class WorkerStoppedError(StorageError):
    """The SQLite worker thread is closed or died: nothing more can run on it."""


class Job(Protocol):
    """Work for the worker thread. ``run`` must not raise; ``fail`` is called instead of
    ``run`` when the worker stops before getting to the job."""

    def run(self, conn: sqlite3.Connection) -> None: ...

    def fail(self, error: BaseException) -> None: ...


def call_in_loop(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any
) -> None:
    """From the worker thread: run ``callback(*args)`` on ``loop`` (if still open)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass  # the event loop is closed: nobody is waiting any more


def deliver(
    future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None
) -> None:
    """From the worker thread: complete ``future`` on its own event loop (if still open)."""

    def complete() -> None:
        if future.done():
            return  # the caller was cancelled; the outcome is for whoever asks by other means
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    call_in_loop(future.get_loop(), complete)


class Call(Generic[T]):
    """``fn(conn, *args)`` on the worker thread, its outcome handed to ``future``."""

    __slots__ = ("args", "fn", "future")

    def __init__(
        self, fn: Callable[..., T], args: tuple[Any, ...], future: asyncio.Future[T]
    ) -> None:
        self.fn = fn
        self.args = args
        self.future = future

    def run(self, conn: sqlite3.Connection) -> None:
        try:
            result = self.fn(conn, *self.args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            deliver(self.future, error=exc)
        else:
            deliver(self.future, result)

    def fail(self, error: BaseException) -> None:
        deliver(self.future, error=error)


class Worker:
    """One thread, one connection (made by ``connect`` in that thread), a queue of jobs."""

    def __init__(self, name: str, connect: Callable[[], sqlite3.Connection]) -> None:
        self.name = name
        self._connect = connect
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopped: WorkerStoppedError | None = None
        self._conn: sqlite3.Connection | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._stopped is None and self._thread.is_alive()

    def submit(self, job: Job) -> None:
        """Queue ``job``; raises :class:`WorkerStoppedError` if the thread is gone."""
        with self._lock:
            if self._stopped is None and not self._thread.is_alive():
                # Gone without saying why: only a fork does that (threads don't survive it).
                self._stopped = WorkerStoppedError(f"{self.name}: its thread is gone (fork?)")
            if self._stopped is not None:
                raise self._stopped
            self._queue.put(job)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in the worker thread, in one hop."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.submit(Call(fn, args, future))
        return await future

    def interrupt(self) -> None:
        """Abort the statement running now, if any (``sqlite3.Connection.interrupt``)."""
        conn = self._conn
        if conn is not None:
            try:
                conn.interrupt()
            except sqlite3.Error:
                pass  # closed meanwhile

    async def close(self, timeout: float = 10.0) -> None:
        """Run what is queued, close the connection, end the thread. Idempotent."""
        with self._lock:
            if self._stopped is None:
                self._stopped = WorkerStoppedError(f"{self.name}: closed")
                self._queue.put(None)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            await asyncio.to_thread(self._thread.join, timeout)
            if self._thread.is_alive():
                logger.warning("%s: still busy %gs after close(); left running", self.name, timeout)

    def _main(self) -> None:
        reason: BaseException | None = None
        try:
            conn = self._connect()
        except BaseException as exc:  # noqa: BLE001 - every queued job gets it
            self._drain(exc)
            return
        self._conn = conn
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    break
                job.run(conn)
        except BaseException as exc:  # noqa: BLE001 - a dead worker fails what is queued
            reason = exc
            logger.error("%s: worker thread died: %s: %s", self.name, type(exc).__name__, exc)
        finally:
            self._conn = None
            try:
                conn.close()
            except sqlite3.Error:
                pass
            self._drain(reason)

    def _drain(self, reason: BaseException | None) -> None:
        """Stop taking jobs; fail every job still queued."""
        with self._lock:
            if self._stopped is None or reason is not None:
                why = "closed" if reason is None else f"{type(reason).__name__}: {reason}"
                self._stopped = WorkerStoppedError(f"{self.name}: the worker stopped ({why})")
                self._stopped.__cause__ = reason
            error = self._stopped
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.fail(error)

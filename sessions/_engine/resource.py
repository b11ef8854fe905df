"""One lifecycle for everything that holds resources: sessions and stores.

``OPEN -> CLOSING -> CLOSED``, and nothing else: an operation is allowed only while
``OPEN``; ``close()`` is idempotent, shared by concurrent callers (they all wait for
the same close), shielded and bounded (a cancelled caller is released after at most
``close_timeout`` seconds plus a short grace while the close goes on in the background).

A resource is also bound to the event loop it is first used on: asyncio locks, futures
and database pools belong to one loop, and a call from another loop is refused at once
with an error naming both, instead of failing obscurely or waiting forever.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING

from ..errors import SessionClosedError, WrongEventLoopError
from .shield import DeadlineExceeded, shielded

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["OPEN", "AsyncResource", "Lifecycle", "loop_name"]

logger = logging.getLogger("sessions")


class Lifecycle(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


#: ``Lifecycle.OPEN`` as a plain module name: every operation checks it, and reading an
#: enum member off its class runs Python code on Python 3.11.
OPEN = Lifecycle.OPEN


def call_name(operation: str) -> str:
    """``"get_items"`` -> ``"get_items()"``; an operation already written as a call
    (``"get_items() on session 'a'"``) is kept as it is."""
    return operation if "(" in operation else f"{operation}()"


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    return f"{type(loop).__name__} at {id(loop):#x}"


class AsyncResource:
    """Base of sessions and stores: lifecycle, loop binding, ``async with``."""

    _lifecycle: Lifecycle = Lifecycle.OPEN
    _closer: asyncio.Future[None] | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ for subclasses

    def _describe(self) -> str:
        """How errors name this resource, e.g. ``session 'abc'``."""
        return type(self).__name__

    def _closed_error(self, operation: str) -> SessionClosedError:
        return SessionClosedError(
            f"{call_name(operation)} on {self._describe()}: it is {self._lifecycle.value}"
        )

    def _close_timeout(self) -> float | None:
        """How long a caller of ``close()`` may be held (``None``: as long as it takes)."""
        return None

    async def _aclose(self) -> None:
        """Release what this resource holds. Called once, by the first ``close()``."""

    # ------------------------------------------------------------------ lifecycle

    @property
    def state(self) -> Lifecycle:
        return self._lifecycle

    @property
    def closed(self) -> bool:
        """``True`` once ``close()`` has been called (closing or closed)."""
        return self._lifecycle is not OPEN

    def _check_open(self, operation: str) -> None:
        if self._lifecycle is not OPEN:
            raise self._closed_error(operation)

    def _check_loop(self, operation: str) -> None:
        """Bind to the running loop on first use; refuse any other loop afterwards."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise WrongEventLoopError(
                f"{call_name(operation)} on {self._describe()} from event loop {loop_name(loop)}, but "
                f"it belongs to event loop {loop_name(self._loop)} (each thread with its "
                "own event loop needs its own store)"
            )

    async def close(self) -> None:
        """Close (idempotent). Concurrent and later calls wait for the same close."""
        if self._closer is None:
            self._lifecycle = Lifecycle.CLOSING
            self._closer = asyncio.ensure_future(self._close_once())
        try:
            await shielded(asyncio.shield(self._closer), timeout=self._close_timeout())
        except DeadlineExceeded as exc:  # the caller is released; closing goes on
            logger.warning(
                "close() of %s %s; it goes on in the background",
                self._describe(),
                exc,
            )

    async def _close_once(self) -> None:
        try:
            await self._aclose()
        finally:
            self._lifecycle = Lifecycle.CLOSED

    async def __aenter__(self) -> Self:
        self._check_open("__aenter__")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

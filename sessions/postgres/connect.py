"""The PostgreSQL backend's connections: :class:`Connections`, the part of the backend
that runs each operation on a pooled connection (counted in flight, failures classified,
the connection handed back clean or terminated) and closes; and the pool helpers of
:class:`~sessions.PostgresStore` (its options, the reset hook, creating it).

A pooled connection goes back to the pool clean or not at all: anything other than a
server-reported error (cancellation, timeout, lost connection) terminates it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

from .._engine.observe import HOOK
from .._model.redact import redact
from .._model.validate import validate_positive_int
from ..errors import StorageError, StoreClosedError, TransientStorageError
from .faults import _classify, _Phase
from .sql import STATEMENTS, _Names, _validate_names

T = TypeVar("T")

logger = logging.getLogger("sessions")

# How long a connection may take to roll back after a failure before it is terminated.
_SETTLE_TIMEOUT = 5.0


class Connections:
    """The backend's pool and the operations in flight on it (``close()`` waits for them).

    ``owns_pool`` decides whether :meth:`close` closes the pool; a borrowed pool stays
    open (close only waits for this backend's operations in flight).
    """

    system = "postgresql"

    def __init__(
        self,
        pool: Any,
        *,
        schema: str = "public",
        table_prefix: str = "txs_",
        owns_pool: bool,
        close_timeout: float = 60.0,
    ) -> None:
        self._names = _Names(*_validate_names(schema, table_prefix))
        self._sql = STATEMENTS.for_names(self._names)
        self._pool: Any = pool
        self._owns_pool = owns_pool
        self._close_timeout = close_timeout
        self._closed = False
        self._reset_skipper: _ResetSkipper | None = None
        self._inflight = 0
        self._drained: asyncio.Event | None = None

    @property
    def pool(self) -> Any:
        """The ``asyncpg.Pool`` in use."""
        return self._pool

    @property
    def owns_pool(self) -> bool:
        return self._owns_pool

    @property
    def schema(self) -> str:
        return self._names.schema

    @property
    def table_prefix(self) -> str:
        return self._names.prefix

    def table(self, name: str) -> str:
        """The quoted, schema-qualified name of table ``name`` (``"items"``, ...)."""
        return self._names.table(name)

    async def _run(
        self,
        operation: str,
        fn: Callable[[Any, _Phase], Awaitable[T]],
    ) -> T:
        """Run ``fn(conn, phase)`` on a pooled connection, counted as in flight."""
        if self._closed:
            raise StoreClosedError(f"PostgreSQL {operation}: the store is closed")
        self._inflight += 1
        try:
            return await self._on_connection(operation, fn)
        finally:
            self._settled(1)

    def _settled(self, count: int) -> None:
        """``count`` operations in flight have ended (:meth:`close` waits for them)."""
        self._inflight -= count
        if self._inflight == 0 and self._drained is not None:
            self._drained.set()

    async def _on_connection(
        self,
        operation: str,
        fn: Callable[[Any, _Phase], Awaitable[T]],
    ) -> T:
        """Run ``fn(conn, phase)`` on a pooled connection; classify failures.

        The connection goes back to the pool only idle, outside any transaction. After
        any failure (a server error, a ``ConflictError``, a timeout, a cancellation)
        ``ROLLBACK`` is sent; asyncpg first waits for the server to acknowledge the
        cancellation of an interrupted statement, so nothing of ours keeps running on
        the server. If that does not succeed within ``_SETTLE_TIMEOUT`` seconds, or the
        connection is gone, or the rollback is itself cancelled, the connection is
        terminated (the server then aborts whatever transaction it had open).
        """
        phase = _Phase()
        observer = HOOK.observer
        waited = time.perf_counter() if observer is not None else 0.0
        try:
            conn = await self._pool.acquire()
        except Exception as exc:
            error = _classify(exc, operation, phase)  # nothing was sent: known
            if error is None:
                raise
            raise error from exc
        if observer is not None:
            observer.pool_wait(self.system, time.perf_counter() - waited)
        clean = False
        try:
            result = await fn(conn, phase)
            clean = True
            return result
        except Exception as exc:
            if isinstance(exc, StorageError):
                raise
            error = _classify(exc, operation, phase)
            if error is None:
                raise
            raise error from exc
        finally:
            try:
                if not clean:
                    clean = await _settle_connection(conn)
            finally:
                if not clean:
                    _terminate(conn)
                await self._release(conn, clean)

    async def _release(self, conn: Any, clean: bool) -> None:
        skipper = self._reset_skipper
        if clean and skipper is not None:
            # Idle and untouched by anyone else: skip the reset query.
            pid = skipper.mark(conn)
            try:
                await _release(self._pool, conn)
            finally:
                skipper.unmark(pid)
        else:
            await _release(self._pool, conn)

    async def _fetch(self, operation: str, sql: str, *args: Any) -> list[Any]:
        async def run(conn: Any, phase: _Phase) -> list[Any]:
            rows: list[Any] = await conn.fetch(sql, *args)
            return rows

        return await self._run(operation, run)

    async def close(self) -> None:
        """Stop new operations, wait for those in flight, close the pool if owned.

        Waits at most ``close_timeout`` seconds; an owned pool that has not closed by
        then is terminated (its connections dropped, their transactions aborted).
        """
        if self._closed:
            return
        self._closed = True
        if self._inflight:
            self._drained = asyncio.Event()
            try:
                await asyncio.wait_for(self._drained.wait(), self._close_timeout)
            except asyncio.TimeoutError:
                logger.warning(
                    "PostgreSQL store close: %d operation(s) still running after %.0fs",
                    self._inflight,
                    self._close_timeout,
                )
        if not self._owns_pool:
            return
        try:
            await asyncio.wait_for(self._pool.close(), self._close_timeout)
        except asyncio.TimeoutError:
            logger.warning(
                "PostgreSQL pool did not close within %.0fs; terminating it", self._close_timeout
            )
            self._pool.terminate()
        except BaseException:
            self._pool.terminate()
            raise


async def _settle_connection(conn: Any) -> bool:
    """After a failure: bring ``conn`` back to idle; ``True`` if it is safe to pool.

    ``ROLLBACK`` is sent even outside a transaction (the server answers with a
    warning only): asyncpg makes it wait until an interrupted statement's
    cancellation has been acknowledged, so a ``True`` here also means no statement
    of ours is still running on the server. A cancellation here propagates; the
    caller then terminates the connection.
    """
    try:
        if conn.is_closed():
            return False
        await asyncio.wait_for(conn.execute("ROLLBACK"), _SETTLE_TIMEOUT)
        return not conn.is_closed() and not conn.is_in_transaction()
    except Exception:  # noqa: BLE001 - any failure here means: terminate the connection
        return False


def _terminate(conn: Any) -> None:
    try:
        conn.terminate()
    except asyncpg.InterfaceError:
        pass  # the pool already detached it: the connection is gone


class _ResetSkipper:
    """The pool ``reset`` hook of pools that a store creates (and owns).

    By default asyncpg sends a reset query (``RESET ALL``, ``UNLISTEN *``, ...) every
    time a connection goes back to the pool: one extra round trip per operation. Our
    own operations never change session state (no ``SET``, ``LISTEN``, cursors or
    session-level advisory locks) and hand a connection back only idle, outside any
    transaction (see :meth:`Connections._run`), so for them the reset is skipped.
    A connection released by anyone else (say, code using ``store.pool`` directly)
    still gets the full reset. asyncpg itself still rolls back an open transaction
    before calling this hook.
    """

    __slots__ = ("_ours",)

    def __init__(self) -> None:
        self._ours: set[int] = set()

    def mark(self, conn: Any) -> int:
        pid: int = conn.get_server_pid()
        self._ours.add(pid)
        return pid

    def unmark(self, pid: int) -> None:
        self._ours.discard(pid)

    async def __call__(self, conn: Any) -> None:
        if conn.get_server_pid() in self._ours:
            return
        query = conn.get_reset_query()
        if query:
            await conn.execute(query)


async def _release(pool: Any, conn: Any) -> None:
    """Give ``conn`` back to ``pool``; never fails the operation that used it.

    asyncpg resets a connection on release and, if that fails (the backend was
    terminated meanwhile), terminates it and re-raises. The work is already done
    (or already failed with its own error) by then, so that error is only logged.
    """
    try:
        await pool.release(conn)
    except Exception as exc:  # noqa: BLE001 - the connection is terminated by asyncpg
        logger.debug("PostgreSQL connection dropped on release: %s: %s", type(exc).__name__, exc)


def _redacted(exc: ValueError | TypeError, dsn: str) -> ValueError | TypeError:
    """``exc`` reworded without the DSN's password. A driver's message about a DSN that
    holds a password may quote a piece of it (``invalid literal for int(): 'ss'``), so
    its text is then left out."""
    detail = f"{type(exc).__name__}: {redact(str(exc), [dsn])}"
    if redact(dsn) != dsn:
        detail = f"{type(exc).__name__} (details not shown: they may quote the password)"
    kind = ValueError if isinstance(exc, ValueError) else TypeError
    return kind(
        f"cannot open a pool on {redact(dsn)}: {detail}; "
        "percent-encode @ : / ? # % in a user name or password, e.g. %40 for @"
    )


def _pool_options(
    connect_kwargs: dict[str, Any], statement_cache_size: int | None
) -> tuple[dict[str, Any], _ResetSkipper | None]:
    """``asyncpg.create_pool`` keywords, with our reset hook unless the caller has one."""
    kwargs = dict(connect_kwargs)
    if statement_cache_size is not None:
        kwargs["statement_cache_size"] = statement_cache_size
    skipper: _ResetSkipper | None = None
    if kwargs.get("reset") is None:  # a caller's own reset hook is left alone
        skipper = _ResetSkipper()
        kwargs["reset"] = skipper
    return kwargs, skipper


def _validate_pool_size(min_size: object, max_size: object) -> None:
    validate_positive_int(max_size, "max_size")
    if isinstance(min_size, bool) or not isinstance(min_size, int):
        raise TypeError(f"min_size must be an int, got {type(min_size).__name__}")
    assert isinstance(max_size, int)
    if min_size < 0 or min_size > max_size:
        raise ValueError(
            f"need 0 <= min_size <= max_size, got min_size={min_size}, max_size={max_size}"
        )


async def _create_pool(dsn: str, **kwargs: Any) -> Any:
    """``asyncpg.create_pool``, its failures as :mod:`sessions.errors` (DSN redacted)."""
    try:
        return await asyncpg.create_pool(dsn, **kwargs)
    except Exception as exc:
        error = _classify(exc, "connect", _Phase())
        if error is None:
            if isinstance(exc, (ValueError, TypeError)):  # e.g. the DSN does not parse
                raise _redacted(exc, dsn) from None
            raise
        message = f"cannot open a pool on {redact(dsn)}: {redact(str(error), [dsn])}"
        if isinstance(error, TransientStorageError):
            raise TransientStorageError(message, outcome_known=True) from exc
        raise StorageError(message) from exc

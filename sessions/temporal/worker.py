"""The worker side: ``SessionsPlugin`` registers the session activities, lets workflow
code import ``sessions`` (the sandbox passes it through), and owns the store's
lifecycle: opened on the first activity that needs it, closed when the worker stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from .._engine.store import Store
from .._tools.url import open_store
from ..errors import CommitConflictError, InvalidHistoryError, InvalidItemError, SessionError
from .payloads import CommitRequest, CommitResult, LoadRequest, LoadResult
from .storeside import commit as commit_batch
from .storeside import load as load_history
from .workflow import COMMIT_ACTIVITY, LOAD_ACTIVITY

__all__ = ["SessionsPlugin", "current_store"]

StoreFactory = Callable[[], Awaitable[Store[Any]]]

#: The plugins whose workers are running in this process (``current_store``).
_RUNNING: list[SessionsPlugin] = []


class SessionsPlugin(SimplePlugin):
    """Give a worker (and a ``Replayer``) what :class:`~sessions.temporal.TemporalSession`
    and :func:`~sessions.temporal.activity_session` need.

    ``store``: a URL for :func:`sessions.open_store` (``sqlite:///agent.db``: one
    worker, or several processes on one machine; ``postgresql://...``: many workers), or
    an async callable returning an open :class:`~sessions.Store`. The store is opened on
    the worker's event loop by the first activity that needs it and closed when the
    worker stops; a ``Replayer`` never opens it.

    Pass it to ``Client.connect(..., plugins=[...])`` or ``Worker(..., plugins=[...])``
    next to the OpenAI Agents plugin.
    """

    def __init__(self, store: str | StoreFactory) -> None:
        if isinstance(store, str):
            if not store:
                raise ValueError("store must be a store URL or an async callable, got ''")
            url = store

            async def opener() -> Store[Any]:
                return await open_store(url)

            self._open: StoreFactory = opener
        elif callable(store):
            self._open = store
        else:
            raise TypeError(
                f"store must be a store URL (str) or an async callable returning a Store, "
                f"got {type(store).__name__}"
            )
        self._store: Store[Any] | None = None
        self._opening: asyncio.Lock | None = None
        super().__init__(
            "txsessions.SessionsPlugin",
            activities=self._activities,
            workflow_runner=_pass_sessions_through,
            run_context=self._running,
        )

    async def store(self) -> Store[Any]:
        """The worker's store (opened on first use, on the running event loop)."""
        if self._store is not None and not self._store.closed:
            return self._store
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._store is None or self._store.closed:
                store = await self._open()
                if not isinstance(store, Store):
                    raise TypeError(
                        f"the store factory returned {type(store).__name__}, not a Store"
                    )
                self._store = store
            return self._store

    def _activities(self, existing: Any) -> list[Callable[..., Any]]:
        plugin = self

        @activity.defn(name=LOAD_ACTIVITY)
        async def load(request: LoadRequest) -> LoadResult:
            with _failures():
                return await load_history(await plugin.store(), request)

        @activity.defn(name=COMMIT_ACTIVITY)
        async def commit(request: CommitRequest) -> CommitResult:
            with _failures():
                return await commit_batch(await plugin.store(), request)

        return [*(existing or []), load, commit]

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        _RUNNING.append(self)
        try:
            yield
        finally:
            _RUNNING.remove(self)
            store, self._store, self._opening = self._store, None, None
            if store is not None:
                await store.close()


def current_store_plugin() -> SessionsPlugin:
    """The one :class:`SessionsPlugin` whose worker runs in this process."""
    if len(_RUNNING) != 1:
        raise SessionError(
            f"current_store(): {len(_RUNNING)} workers with a SessionsPlugin run in this "
            "process; pass store= explicitly"
            if _RUNNING
            else "current_store(): no worker with a SessionsPlugin runs in this process "
            "(add SessionsPlugin(store) to the worker's plugins, or pass store=)"
        )
    return _RUNNING[0]


async def current_store() -> Store[Any]:
    """The store of the worker (with a :class:`SessionsPlugin`) running in this process."""
    return await current_store_plugin().store()


def _pass_sessions_through(runner: WorkflowRunner | None) -> WorkflowRunner:
    """The workflow sandbox imports ``sessions`` (and ``orjson``, which it encodes items
    with) once, outside, as the SDK's plugin does ``agents``; and ``annotated_types``,
    which pydantic imports lazily while the SDK runs in workflow code (openai-agents
    0.20: the sandbox warns of an import after the workflow loaded, which fails the
    workflow task where warnings are errors)."""
    if runner is None:
        raise ValueError("SessionsPlugin: the worker has no workflow runner to configure")
    if isinstance(runner, SandboxedWorkflowRunner):
        modules = ("sessions", "orjson", "annotated_types")
        restrictions = runner.restrictions.with_passthrough_modules(*modules)
        return dataclasses.replace(runner, restrictions=restrictions)
    return runner


#: Failures a retry cannot mend: the activity fails for good, naming the error.
_FINAL = (InvalidHistoryError, InvalidItemError, ValueError, TypeError)


class _failures:
    """Turn our errors that no retry mends into non-retryable ``ApplicationError``\\ s
    (type: the error's class name); everything else is retried (a conflict with
    another writer, a lost connection: the batch id makes the retry safe)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, CommitConflictError) or not isinstance(exc, _FINAL):
            return
        raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc

"""SQLite's part of group commit (``sessions.sqlite.group.Group``) when its worker thread
cannot take a job."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from sessions import Batch, SQLiteStore
from sessions.sqlite.worker import WorkerStoppedError


def _batch() -> Batch:
    return Batch(uuid.uuid4().hex, False, (), ('{"role": "user", "content": "hi"}',))


async def test_commits_after_the_worker_stopped_each_fail_and_none_hangs(tmp_path: Path) -> None:
    """Before the fix, the first commit left behind a group it could not queue, which
    the next commit joined and then waited for forever."""
    store = await SQLiteStore.open(tmp_path / "stopped.db")
    backend = store.sqlite
    worker = backend._worker
    try:
        worker._stopped = WorkerStoppedError("the worker stopped (test)")
        for _ in range(2):
            with pytest.raises(WorkerStoppedError):
                await asyncio.wait_for(backend.apply("s", [_batch()]), 5)
        worker._stopped = None  # the thread never stopped: it takes jobs again
        await asyncio.wait_for(backend.apply("s", [_batch()]), 5)
        assert len(await backend.load("s", None)) == 1
    finally:
        worker._stopped = None
        await store.close()

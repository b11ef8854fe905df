"""Opening databases for the reliability suite, in tests, child processes and the soak.

``Db`` and ``TargetLike`` are ``tests.conftest.Target``: a backend's provision
(``tests/provision/``), so scenario code takes either.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from sessions import Store, open_store
from tests.provision import PROVISIONS, Provision, RawReader
from tests.provision.postgres import (  # noqa: F401 - scenarios import them from here
    PG_DSN,
    pg_execute,
    with_query,
)

from .invariant import History, check_rows

REPO = Path(__file__).resolve().parents[2]

#: What scenarios take: a database (``tests/provision/``), a test's target or one of its own.
TargetLike = Provision
Db = Provision


async def open_url(url: str, **options: Any) -> Store[Any]:
    """A store for ``url`` (``sqlite:///path`` or ``postgresql://...?schema=x``).

    The package's own :func:`sessions.open_store`, with a small pool for PostgreSQL.
    """
    if url.startswith(("postgres://", "postgresql://")):
        options.setdefault("min_size", 1)
        options.setdefault("max_size", 4)
    return await open_store(url, **options)


def new_db(kind: str, directory: str | None = None, *, prefix: str = "txs_rel") -> Db:
    """A database of its own for the soak, a child process or a test; ``drop()`` removes it."""
    if kind not in PROVISIONS:
        raise ValueError(f"unknown backend {kind!r}")
    return PROVISIONS[kind].new(directory, name=prefix)


async def read_history(
    target: TargetLike, session_id: str, *, reader: RawReader | None = None
) -> History:
    """The stored history, from the raw rows (one snapshot).

    Every row is checked (:func:`~tests.reliability.invariant.check_rows`): the result
    holds the items of the valid rows and, in ``.problems``, everything wrong. Reads
    through ``reader`` (one connection kept open) when given, else a connection of its own.
    """
    if reader is not None:
        return check_rows(await reader.read(session_id))
    async with target.raw_reader() as own:
        return check_rows(await own.read(session_id))


def child_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.reliability._child", *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONHASHSEED", "0")
    return env


async def spawn(*args: str, stdin: bool = False) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *child_command(*args),
        cwd=str(REPO),
        env=child_env(),
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )

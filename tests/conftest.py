"""Shared fixtures: one contract suite, every backend.

``target`` is parametrized over the backends. Each target is the backend's provision
(``tests/provision/``): it opens stores on the same database (``await target.open()``, as
often as a test likes, e.g. to play a second process), tells a child process how to reach
it (``target.url``), and answers everything backend-specific a test asks (raw SQL, hangs,
triggers), so that no test branches on the backend's kind.

PostgreSQL: the DSN comes from ``SESSIONS_TEST_POSTGRES_DSN``, else
``postgresql://postgres@127.0.0.1:5432/postgres``. Each test run works in a schema of
its own, dropped at the end. When no server answers, PostgreSQL tests are skipped with
one line saying why, except when ``CI`` is set: then they fail.

Under ``CI`` no skip passes silently: ``tests/skip_policy.py`` (its hooks are imported
below) turns every skip whose reason is not on its short allow-list into a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sessions import Store
from tests.provision import PROVISIONS, Provision
from tests.provision.postgres import (  # noqa: F401 - imported from here by many tests
    DEFAULT_PG_DSN,
    PG_DSN,
    drop_schema,
    pg_execute,
    postgres_problem,
    require_postgres,
    run_outside_loop,
)
from tests.skip_policy import (  # noqa: F401 - pytest hooks, registered by being here
    in_ci,
    pytest_collectreport,
    pytest_make_collect_report,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)

IN_CI = in_ci()

BACKENDS = ["sqlite", "postgres"]

#: A database that tests open stores on: one backend's provision (``tests/provision/``).
Target = Provision


@pytest.fixture(scope="session")
def pg_schema() -> Iterator[str]:
    """A schema of this test run's own, dropped afterwards."""
    require_postgres()
    name = f"txs_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    yield name
    run_outside_loop(drop_schema(name))


@pytest.fixture
def sdk_pg_schema() -> Iterator[str]:
    """A throwaway PostgreSQL schema for the SDK's SQLAlchemySession tables."""
    require_postgres()
    name = f"txs_sdk_{uuid.uuid4().hex[:10]}"
    run_outside_loop(pg_execute(f'CREATE SCHEMA "{name}"'))
    yield name
    run_outside_loop(drop_schema(name))


def make_target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    return PROVISIONS[kind].for_test(tmp_path, request)


@pytest.fixture(params=BACKENDS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    t = make_target(request.param, tmp_path, request)
    yield t
    await t.close_all()


@pytest.fixture
async def store(target: Target) -> Store[Any]:
    return await target.open()


@pytest.fixture(params=[*BACKENDS, "memory"])
async def tstore(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store[Any]]:
    """A store on every backend, ``MemoryStore`` (the reference) included."""
    target = make_target(request.param, tmp_path, request)
    yield await target.open()
    await target.close_all()


@pytest.fixture
def sid() -> str:
    """A fresh session id (runs share a PostgreSQL schema; ids keep tests apart)."""
    return f"s-{uuid.uuid4().hex}"

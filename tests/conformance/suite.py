"""One conformance run per subject per test session, shared by the tests that need it.

``report_of(name, ...)`` builds the subject (skipping, or failing under ``CI``, when
what it needs is missing) and runs ``sessions.testing`` on it once; the per-subject
test and the capability-table test both read the same report.
"""

from __future__ import annotations

import importlib
import os
import uuid
from pathlib import Path

import pytest

from sessions.testing import Capability, Outcome, Report, Subject, run_conformance
from tests.conformance import subjects
from tests.conftest import IN_CI, PG_DSN, require_postgres, run_outside_loop

REDIS_URL = os.environ.get("SESSIONS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

SUBJECTS = [
    "sqlite",
    "postgres",
    "memory",
    "sdk-sqlite",
    "sdk-async-sqlite",
    "sdk-sqlalchemy",
    "sdk-redis",
]

_EVERYTHING = dict.fromkeys(Capability, Outcome.PASSED)
_WRAPPED = {
    **_EVERYTHING,
    Capability.ATOMIC_BATCH: Outcome.NOT_OFFERED,
    Capability.IDEMPOTENT_RETRY: Outcome.NOT_OFFERED,
}
EXPECTED: dict[str, dict[Capability, Outcome]] = {
    "sqlite": _EVERYTHING,
    "postgres": _EVERYTHING,
    "memory": {**_EVERYTHING, Capability.CROSS_PROCESS: Outcome.NOT_OFFERED},
    "sdk-sqlite": _WRAPPED,
    "sdk-async-sqlite": _WRAPPED,
    "sdk-sqlalchemy": _WRAPPED,
    "sdk-redis": _WRAPPED,
}

_REPORTS: dict[str, Report] = {}


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI is set, so this conformance subject must run: {reason}", pytrace=False)
    pytest.skip(reason)


def _require_sdk(module: str, name: str) -> None:
    try:
        getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        _missing(f"the installed openai-agents has no {module}.{name}: {exc}")


def _require_redis() -> None:
    try:
        from redis.asyncio import Redis
    except ImportError as exc:
        _missing(f"redis-py is not installed: {exc}")

    async def ping() -> None:
        client = Redis.from_url(REDIS_URL)
        try:
            await client.ping()
        finally:
            await client.aclose()

    try:
        run_outside_loop(ping())
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        _missing(f"no Redis at {REDIS_URL}: {type(exc).__name__}: {exc}")


def _drop_redis_keys(prefix: str) -> None:
    from redis.asyncio import Redis

    async def drop() -> None:
        client = Redis.from_url(REDIS_URL)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()

    run_outside_loop(drop())


def make_subject(name: str, directory: Path, request: pytest.FixtureRequest) -> Subject:
    """The subject ``name`` on fresh storage under ``directory`` (sync: probes run here)."""
    path = str(directory / f"{name}.db")
    if name == "sqlite":
        return subjects.sqlite(path)
    if name == "postgres":
        require_postgres()
        return subjects.postgres(PG_DSN, request.getfixturevalue("pg_schema"))
    if name == "memory":
        return subjects.memory()
    if name == "sdk-sqlite":
        _require_sdk("agents", "SQLiteSession")
        return subjects.sdk_sqlite(path)
    if name == "sdk-async-sqlite":
        _require_sdk("agents.extensions.memory", "AsyncSQLiteSession")
        return subjects.sdk_async_sqlite(path)
    if name == "sdk-sqlalchemy":
        _require_sdk("agents.extensions.memory", "SQLAlchemySession")
        return subjects.sdk_sqlalchemy(path)
    if name == "sdk-redis":
        _require_sdk("agents.extensions.memory", "RedisSession")
        _require_redis()
        prefix = f"txs-conformance-{uuid.uuid4().hex}"
        request.addfinalizer(lambda: _drop_redis_keys(prefix))
        return subjects.sdk_redis(REDIS_URL, prefix)
    raise ValueError(f"unknown conformance subject {name!r}")


def subject_for(name: str, request: pytest.FixtureRequest) -> Subject:
    directory = request.getfixturevalue("tmp_path_factory").mktemp(name)
    return make_subject(name, directory, request)


async def report_of(name: str, subject: Subject) -> Report:
    """The report of ``name``, run once per test session."""
    if name not in _REPORTS:
        _REPORTS[name] = await run_conformance(subject)
    return _REPORTS[name]

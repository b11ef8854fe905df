"""OpenTelemetry (``sessions.otel``), on every backend: what a commit and a load report.

Read back through the OpenTelemetry SDK's own in-memory metric reader and span exporter.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from sessions import Store
from sessions.errors import CommitConflictError, TransientStorageError
from sessions.otel import instrument
from tests.conftest import Target
from tests.contract.proxy import install_proxy
from tests.contract.test_group_commit import EARLY, until
from tests.helpers import committed, msg

SYSTEM = {"sqlite": "sqlite", "postgres": "postgresql"}


class Telemetry:
    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.instrumentation = instrument(
            meter_provider=MeterProvider(metric_readers=[self.reader]),
            tracer_provider=tracer_provider,
        )

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def count(self, name: str, **attributes: str) -> int:
        """Observations of a histogram (or the sum of a counter) with these attributes."""
        total = 0
        for point in self.points(name):
            if all(point.attributes.get(k.replace("_", ".")) == v for k, v in attributes.items()):
                total += int(getattr(point, "count", None) or getattr(point, "value", 0))
        return total


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    t.instrumentation.uninstrument()


def _op(system: str, name: str, **extra: str) -> dict[str, str]:
    return {"db_system_name": system, "db_operation_name": name, **extra}


async def test_each_commit_and_load_is_one_duration_point_and_one_span_named_after_the_backend(
    store: Store[Any], target: Target, sid: str, telemetry: Telemetry
) -> None:
    system = SYSTEM[target.kind]
    session = store.session(sid)
    for turn in range(2):
        await session.add_items([msg(f"q{turn}"), msg(f"a{turn}")])
        await session.commit()
    assert await session.get_items() == [msg("q0"), msg("a0"), msg("q1"), msg("a1")]

    assert telemetry.count("db.client.operation.duration", **_op(system, "commit")) == 2
    assert telemetry.count("db.client.operation.duration", **_op(system, "load")) == 1
    assert telemetry.count("txsessions.commit.items", db_system_name=system) == 2
    items = telemetry.points("txsessions.commit.items")
    assert sum(point.sum for point in items) == 4
    spans = [span.name for span in telemetry.spans.get_finished_spans()]
    assert spans == [f"commit {system}", f"commit {system}", f"load {system}"]
    for span in telemetry.spans.get_finished_spans():
        assert span.attributes is not None
        assert sid not in str(dict(span.attributes)), "a session id was recorded"
        assert span.status.status_code is not StatusCode.ERROR


async def test_a_conflicting_commit_is_counted_as_a_conflict_with_an_error_span(
    store: Store[Any], target: Target, sid: str, telemetry: Telemetry
) -> None:
    system = SYSTEM[target.kind]
    writer = store.session(sid)
    await writer.add_items([msg("only")])
    await writer.commit()
    first, second = store.session(sid), store.session(sid)
    await first.pop_item()
    await second.pop_item()
    await first.commit()
    with pytest.raises(CommitConflictError):
        await second.commit()
    assert telemetry.count("txsessions.commit.conflicts", db_system_name=system) == 1
    failed = _op(system, "commit", txsessions_outcome="conflict")
    assert telemetry.count("db.client.operation.duration", **failed) == 1
    errors = [
        s for s in telemetry.spans.get_finished_spans() if s.status.status_code is StatusCode.ERROR
    ]
    assert [s.name for s in errors] == [f"commit {system}"]
    assert (
        errors[0].attributes is not None and errors[0].attributes["error.type"] == "ConflictError"
    )


async def test_a_commit_retried_after_a_transient_failure_reports_its_retries_and_attempts(
    store: Store[Any], target: Target, sid: str, telemetry: Telemetry
) -> None:
    system = SYSTEM[target.kind]
    proxy = install_proxy(store)
    failures = [TransientStorageError("injected: connection reset", outcome_known=True)]

    async def fail_once() -> None:
        if failures:
            raise failures.pop()

    proxy.before_apply = fail_once
    await committed(store, sid, "x")
    assert telemetry.count("txsessions.commit.retries", db_system_name=system) == 1
    (span,) = [s for s in telemetry.spans.get_finished_spans() if s.name.startswith("commit")]
    assert span.attributes is not None and span.attributes["txsessions.attempts"] == 2


async def test_commits_that_shared_one_transaction_report_the_group_size(
    store: Store[Any], target: Target, telemetry: Telemetry
) -> None:
    run = uuid.uuid4().hex[:8]
    proxy = install_proxy(store)
    sessions = [store.session(f"otel-{run}-{i}") for i in range(EARLY + 4)]
    for session in sessions:
        await session.add_items([msg("hello")])
    async with target.writes_held():
        tasks = [asyncio.ensure_future(session.commit()) for session in sessions]
        await until(lambda: proxy.apply_calls == len(sessions), "every commit reached the backend")
    await asyncio.gather(*tasks)
    sizes = telemetry.points("txsessions.group_commit.size")
    assert sum(point.sum for point in sizes) == len(sessions)  # every commit, once
    assert max(point.max for point in sizes) > 1  # and at least one group of several


async def test_the_wait_for_a_pooled_connection_is_reported_by_postgresql_alone(
    store: Store[Any], target: Target, sid: str, telemetry: Telemetry
) -> None:
    await committed(store, sid, "x")
    waits = telemetry.count("db.client.connection.wait_time", db_system_name=SYSTEM[target.kind])
    if target.pooled:
        assert waits >= 1
    else:  # SQLite has one connection, on its worker thread: no pool to wait for
        assert waits == 0


async def test_a_commit_that_waited_for_its_sessions_lock_reports_that_wait(
    store: Store[Any], target: Target, sid: str, telemetry: Telemetry
) -> None:
    """Two commits of one session object: the second waits for the session's lock while
    the first is held in flight (before its apply), and reports at least that wait."""
    held, release = asyncio.Event(), asyncio.Event()

    async def hold_the_first_apply() -> None:
        if not held.is_set():
            held.set()
            await release.wait()

    install_proxy(store).before_apply = hold_the_first_apply
    session = store.session(sid)
    await session.add_items([msg("q")])
    first = asyncio.ensure_future(session.commit())
    await asyncio.wait_for(held.wait(), 10)  # the first holds the lock, its apply paused
    await session.add_items([msg("a")])  # staged while the first is in flight
    second = asyncio.ensure_future(session.commit())
    await until(lambda: len(session._lock._waiters) == 1, "the second waits for the lock")
    await asyncio.sleep(0.05)
    assert not second.done()
    release.set()
    await asyncio.gather(first, second)
    assert await session.get_items() == [msg("q"), msg("a")]

    (point,) = telemetry.points("txsessions.commit.lock.wait_time")
    assert point.attributes == {"db.system.name": SYSTEM[target.kind]}
    assert point.count == 2  # one wait per commit
    assert point.max >= 0.05  # the second's: at least the pause above
    assert point.min < 0.05  # the first's: it found the lock free


async def test_an_uncontended_commit_reports_a_lock_wait_of_almost_nothing(
    store: Store[Any], target: Target, sid: str, telemetry: Telemetry
) -> None:
    session = await committed(store, sid, "x")
    await session.get_items()  # reads the version
    await session.add_items([msg("y")])
    await session.commit(expected_version=session.version)  # this path times it too
    (point,) = telemetry.points("txsessions.commit.lock.wait_time")
    assert point.attributes == {"db.system.name": SYSTEM[target.kind]}
    assert point.count == 2
    assert 0 <= point.max < 0.05


async def test_after_uninstrument_nothing_more_is_reported(
    store: Store[Any], sid: str, telemetry: Telemetry
) -> None:
    session = await committed(store, sid, "x")
    telemetry.instrumentation.uninstrument()
    await session.add_items([msg("y")])
    await session.commit()
    await session.get_items()
    assert len(telemetry.spans.get_finished_spans()) == 1


def test_instrument_refuses_a_provider_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="meter_provider must be an opentelemetry MeterProvider"):
        instrument(meter_provider="otel://collector")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracer_provider must be an opentelemetry TracerProvider"):
        instrument(tracer_provider=object())  # type: ignore[arg-type]


def test_without_sessions_otel_no_opentelemetry_module_is_imported(tmp_path: Any) -> None:
    script = (
        "import asyncio, sys\n"
        "from sessions import SQLiteSession\n"
        "async def main():\n"
        f"    s = SQLiteSession('s', {str(tmp_path / 'x.db')!r})\n"
        "    await s.add_items([{'role': 'user', 'content': 'x'}])\n"
        "    await s.commit()\n"
        "    assert await s.get_items()\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"

"""Zero-code instrumentation: ``opentelemetry-instrument`` finds txsessions by itself.

The subprocess tests run ``opentelemetry-instrument`` (the one installed next to this
interpreter) on a script that never calls :func:`sessions.otel.instrument`, with the
SDK's console exporters chosen by ``OTEL_*`` variables, and read what it printed.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sessions import Store
from sessions.otel import TxSessionsInstrumentor
from tests.helpers import committed

SCRIPT = """\
import asyncio

from sessions import SQLiteStore


async def main() -> None:
    store = await SQLiteStore.open({path!r})
    try:
        session = store.session({sid!r})
        await session.add_items([{{"role": "user", "content": {text!r}}}])
        await session.commit()
        items = await session.get_items()
        assert [item["content"] for item in items] == [{text!r}], items
    finally:
        await store.close()


asyncio.run(main())
"""


def _json_documents(text: str) -> list[Any]:
    """Every JSON document in ``text`` (the console exporters print them one after
    another, each over several lines)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while True:
        at = text.find("{", at)
        if at < 0:
            return found
        document, at = decoder.raw_decode(text, at)
        found.append(document)


class Reported:
    """What ``opentelemetry-instrument`` printed: spans and metric points by name."""

    def __init__(self, stdout: str) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: dict[str, list[dict[str, Any]]] = {}
        for document in _json_documents(stdout):
            if "resource_metrics" not in document:
                self.spans.append(document)
                continue
            for resource in document["resource_metrics"]:
                for scope in resource["scope_metrics"]:
                    for metric in scope["metrics"]:
                        points = metric["data"]["data_points"]
                        self.metrics.setdefault(metric["name"], []).extend(points)

    def span_names(self) -> list[str]:
        return sorted(span["name"] for span in self.spans)


def run_instrumented(tmp_path: Path, **environment: str) -> tuple[Reported, str]:
    """Run the script under ``opentelemetry-instrument``; what it reported, and its
    whole output (to look for what must never be there)."""
    command = Path(sys.executable).parent / "opentelemetry-instrument"
    assert command.exists(), f"{command} is missing: the otel extra installs it"
    sid, text = f"zero-code-{uuid.uuid4().hex}", f"never-recorded-{uuid.uuid4().hex}"
    script = tmp_path / "app.py"
    script.write_text(SCRIPT.format(path=str(tmp_path / "chat.db"), sid=sid, text=text))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="console",
        OTEL_LOGS_EXPORTER="none",
        OTEL_METRIC_EXPORT_INTERVAL="600000",  # one export, when the process exits
        **environment,
    )
    done = subprocess.run(
        [str(command), sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    output = done.stdout + done.stderr
    for secret in (sid, text):
        assert secret not in output, "a session id or an item's text was reported"
    return Reported(done.stdout), output


def test_opentelemetry_instrument_reports_commit_and_load_spans_and_durations_without_instrument(
    tmp_path: Path,
) -> None:
    reported, _ = run_instrumented(tmp_path)
    assert reported.span_names() == ["commit sqlite", "load sqlite"]
    for span in reported.spans:
        assert span["kind"] == "SpanKind.CLIENT"
        assert span["attributes"]["db.system.name"] == "sqlite"
    durations = reported.metrics["db.client.operation.duration"]
    by_operation = {point["attributes"]["db.operation.name"]: point for point in durations}
    assert set(by_operation) == {"commit", "load"}
    assert by_operation["commit"]["count"] == 1
    assert by_operation["commit"]["sum"] > 0
    (items,) = reported.metrics["txsessions.commit.items"]
    assert items["sum"] == 1
    (wait,) = reported.metrics["txsessions.commit.lock.wait_time"]
    assert wait["count"] == 1


def test_opentelemetry_instrument_leaves_txsessions_out_when_it_is_disabled_by_name(
    tmp_path: Path,
) -> None:
    reported, _ = run_instrumented(tmp_path, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="txsessions")
    assert reported.span_names() == []
    assert "db.client.operation.duration" not in reported.metrics


def test_the_opentelemetry_instrumentor_entry_point_is_txsessions_instrumentor() -> None:
    (entry,) = [
        entry
        for entry in importlib.metadata.entry_points(group="opentelemetry_instrumentor")
        if entry.name == "txsessions"
    ]
    assert entry.load() is TxSessionsInstrumentor


async def test_the_instrumentor_reports_to_the_providers_it_is_given_until_uninstrumented(
    store: Store[Any], sid: str
) -> None:
    reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    instrumentor = TxSessionsInstrumentor()
    instrumentor.instrument(
        meter_provider=MeterProvider(metric_readers=[reader]), tracer_provider=tracer_provider
    )
    try:
        assert instrumentor.is_instrumented_by_opentelemetry
        session = await committed(store, sid, "x")
    finally:
        instrumentor.uninstrument()
    await session.add_items([{"role": "user", "content": "y"}])
    await session.commit()  # after uninstrument(): not reported
    assert [span.name.split()[0] for span in spans.get_finished_spans()] == ["commit"]
    data = reader.get_metrics_data()
    assert data is not None
    names = {
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert "db.client.operation.duration" in names

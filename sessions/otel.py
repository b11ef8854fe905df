"""OpenTelemetry metrics and traces for commits and loads: ``pip install 'txsessions[otel]'``.

>>> from sessions.otel import instrument
>>> instrumentation = instrument()      # the global meter and tracer providers
>>> instrumentation.uninstrument()      # back to nothing reported

Or with no code at all: ``opentelemetry-instrument python app.py`` loads
:class:`TxSessionsInstrumentor` through the package's ``opentelemetry_instrumentor``
entry point, as it loads the opentelemetry-python-contrib instrumentations.

Nothing of OpenTelemetry is imported until this module is; without it, the commit and
load paths pay one global lookup each. What is reported (names after OpenTelemetry's
database semantic conventions where one exists; ``docs/observability.md``):

* ``db.client.operation.duration`` (histogram, s): every commit and every load, with
  ``db.system.name`` (``sqlite``, ``postgresql``, ``memory``, ``other`` for a wrapped
  SDK session), ``db.operation.name`` (``commit``, ``load``) and, when it did not
  succeed, ``error.type`` (the exception's class) and ``txsessions.outcome``;
* ``txsessions.commit.items`` (histogram): items written per commit;
* ``txsessions.commit.retries``, ``txsessions.commit.conflicts``,
  ``txsessions.commit.unknown_outcomes`` (counters);
* ``txsessions.group_commit.size`` (histogram): commits per shared transaction (SQLite
  and PostgreSQL group commit);
* ``db.client.connection.wait_time`` (histogram, s): waits for a pooled connection
  (PostgreSQL);
* ``txsessions.commit.lock.wait_time`` (histogram, s): how long each commit waited for
  its session's lock (another operation of that session object under way) before its
  transaction could start;
* a span per commit and per load (``commit <system>``, ``load <system>``; kind CLIENT),
  with the attributes above, ``txsessions.attempts`` and ``txsessions.batches``.

Session ids and item text are never recorded (they are the users').
"""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from opentelemetry import context, metrics, trace
from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,  # its module is "# type: ignore"d whole: mypy sees nothing in it
)

from ._engine.observe import HOOK, Operation, install

__all__ = ["Instrumentation", "TxSessionsInstrumentor", "instrument"]

_SCOPE = "txsessions"
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _version() -> str:
    try:
        return importlib.metadata.version("txsessions")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        return "0"


class _Observer:
    """The :class:`~sessions._engine.observe.Observer` that reports to OpenTelemetry."""

    def __init__(self, meter: metrics.Meter, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        histogram, counter = meter.create_histogram, meter.create_counter
        self._duration = histogram(
            "db.client.operation.duration",
            "s",
            "Duration of txsessions commits and loads.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self._items = histogram("txsessions.commit.items", "{item}", "Items written per commit.")
        self._retries = counter("txsessions.commit.retries", "{retry}", "Commit attempts retried.")
        self._conflicts = counter(
            "txsessions.commit.conflicts",
            "{commit}",
            "Commits refused because another writer changed the history.",
        )
        self._unknown = counter(
            "txsessions.commit.unknown_outcomes",
            "{commit}",
            "Commits that ended without knowing whether they were applied.",
        )
        self._group = histogram(
            "txsessions.group_commit.size", "{commit}", "Commits that shared one transaction."
        )
        self._wait = histogram(
            "db.client.connection.wait_time",
            "s",
            "Time waited for a pooled connection.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self._lock_wait = histogram(
            "txsessions.commit.lock.wait_time",
            "s",
            "Time a commit waited for its session's lock before its transaction started.",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )

    def begin(self, op: Operation) -> None:
        span = self._tracer.start_span(
            f"{op.name} {op.system}",
            kind=trace.SpanKind.CLIENT,
            attributes={"db.system.name": op.system, "db.operation.name": op.name},
        )
        op.handle = (span, context.attach(trace.set_span_in_context(span)))

    def end(self, op: Operation) -> None:
        seconds = time.perf_counter() - op.started
        attributes: dict[str, str] = {"db.system.name": op.system, "db.operation.name": op.name}
        if op.outcome != "ok":
            attributes["txsessions.outcome"] = op.outcome
            attributes["error.type"] = op.error_type or op.outcome
        self._duration.record(seconds, attributes)
        if op.name == "commit":
            self._commit_metrics(op, attributes)
        span, token = op.handle
        context.detach(token)
        span.set_attributes(attributes)
        span.set_attribute("txsessions.items", op.items)
        if op.name == "commit":
            span.set_attribute("txsessions.attempts", op.attempts)
            span.set_attribute("txsessions.batches", op.batches)
        if op.outcome != "ok":
            span.set_status(trace.Status(trace.StatusCode.ERROR, op.outcome))
        span.end()

    def _commit_metrics(self, op: Operation, attributes: dict[str, str]) -> None:
        base = {"db.system.name": op.system}
        self._items.record(op.items, base)
        if op.attempts > 1:
            self._retries.add(op.attempts - 1, base)
        if op.outcome == "conflict":
            self._conflicts.add(1, base)
        elif op.outcome == "unknown":
            self._unknown.add(1, base)

    def pool_wait(self, system: str, seconds: float) -> None:
        self._wait.record(seconds, {"db.system.name": system})

    def lock_wait(self, system: str, seconds: float) -> None:
        self._lock_wait.record(seconds, {"db.system.name": system})

    def group(self, system: str, commits: int) -> None:
        self._group.record(commits, {"db.system.name": system})


@dataclass(frozen=True)
class Instrumentation:
    """What :func:`instrument` installed; :meth:`uninstrument` removes it."""

    observer: Any

    def uninstrument(self) -> None:
        """Stop reporting (if this is still the installed instrumentation)."""
        if HOOK.observer is self.observer:
            install(None)


def instrument(
    *,
    meter_provider: metrics.MeterProvider | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Instrumentation:
    """Report every commit and load of this process to OpenTelemetry.

    ``meter_provider`` / ``tracer_provider``: the providers to use (default: the global
    ones, set with ``opentelemetry.metrics.set_meter_provider`` and
    ``opentelemetry.trace.set_tracer_provider``). Replaces an earlier instrumentation.
    """
    if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
        raise TypeError(
            f"meter_provider must be an opentelemetry MeterProvider, not "
            f"{type(meter_provider).__name__}"
        )
    if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
        raise TypeError(
            f"tracer_provider must be an opentelemetry TracerProvider, not "
            f"{type(tracer_provider).__name__}"
        )
    meter = metrics.get_meter(_SCOPE, _version(), meter_provider=meter_provider)
    tracer = trace.get_tracer(_SCOPE, _version(), tracer_provider=tracer_provider)
    observer = _Observer(meter, tracer)
    install(observer)
    return Instrumentation(observer)


class TxSessionsInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """:func:`instrument` as an OpenTelemetry instrumentor, for zero-code instrumentation.

    ``opentelemetry-instrument python app.py`` finds it through the package's
    ``opentelemetry_instrumentor`` entry point (named ``txsessions``: leave it out with
    ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=txsessions``) and calls ``instrument()`` on
    it after the SDK is configured; ``TxSessionsInstrumentor().instrument(meter_provider=...,
    tracer_provider=...)`` does the same by hand. Like every ``BaseInstrumentor`` it is a
    singleton, and ``uninstrument()`` stops the reporting.
    """

    _installed: Instrumentation | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """Nothing but this package, which is the one instrumented."""
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        self._installed = instrument(
            meter_provider=kwargs.get("meter_provider"),
            tracer_provider=kwargs.get("tracer_provider"),
        )

    def _uninstrument(self, **kwargs: Any) -> None:
        installed, self._installed = self._installed, None
        if installed is not None:
            installed.uninstrument()

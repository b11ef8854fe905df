"""The model-based test, CI-sized: seeded, bounded, every backend (see docs/RELIABILITY.md,
"Every operation against every other"). ``python -m tests.model.soak`` is its long run."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import run_state_machine_as_test

from tests.conftest import require_postgres

from .machine import ModelMachine

#: Programs per backend and steps per program: the whole file stays under ~90 s here.
BUDGET = {"memory": 200, "sqlite": 100, "postgres": 60}
#: Shrinking a failure stops after this long (the test stays under pytest-timeout's 120 s).
SHRINK_SECONDS = 30
STEPS = 30


def machine_for(kind: str, schema: str | None = None) -> type[ModelMachine]:
    return type(f"ModelMachine_{kind}", (ModelMachine,), {"kind": kind, "pg_schema": schema})


def ci_settings(kind: str) -> settings:
    return settings(
        max_examples=BUDGET[kind],
        stateful_step_count=STEPS,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        report_multiple_bugs=False,
    )


def run(kind: str, schema: str | None = None) -> None:
    saved = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = SHRINK_SECONDS
    try:
        run_state_machine_as_test(machine_for(kind, schema), settings=ci_settings(kind))
    finally:
        engine.MAX_SHRINKING_SECONDS = saved


def test_every_operation_matches_the_model_on_memory() -> None:
    run("memory")


def test_every_operation_matches_the_model_on_sqlite() -> None:
    run("sqlite")


@pytest.mark.postgres
def test_every_operation_matches_the_model_on_postgres(request: Any) -> None:
    require_postgres()
    run("postgres", request.getfixturevalue("pg_schema"))

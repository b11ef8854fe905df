"""The model-based test's long run: random programs until N steps per backend.

    python -m tests.model.soak --steps 100000 [--backends memory,sqlite,postgres] [--seed S]
    python -m tests.model.soak --check      # the docs region is what the json says

Each round runs a few programs with one hypothesis seed (seed, seed + 1, ...); a round
that finds a violation counts one and the next round carries on with the next seed. The
figures go to docs/generated/model.json and the generated:model region of
docs/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import Any

import hypothesis.core
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.provision import PROVISIONS

from . import report
from .machine import ModelMachine

PROGRAMS_PER_ROUND = 10
STEPS_PER_PROGRAM = 30


class Counting(ModelMachine):
    """Counts programs and steps into ``tally``."""

    tally: dict[str, int] = {}

    def __init__(self) -> None:
        super().__init__()
        self.tally["programs"] += 1

    def teardown(self) -> None:
        self.tally["steps"] += max(self.steps - 1, 0)  # the first check precedes any step
        super().teardown()


def round_settings() -> settings:
    return settings(
        max_examples=PROGRAMS_PER_ROUND,
        stateful_step_count=STEPS_PER_PROGRAM,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )


def soak_backend(kind: str, steps: int, seed: int, schema: str | None) -> dict[str, Any]:
    tally = {"programs": 0, "steps": 0}
    machine = type(f"Soak_{kind}", (Counting,), {"kind": kind, "pg_schema": schema, "tally": tally})
    violations, examples, round_seed = 0, [], seed
    started = time.monotonic()
    while tally["steps"] < steps:
        hypothesis.core.global_force_seed = round_seed  # type: ignore[attr-defined]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                run_state_machine_as_test(machine, settings=round_settings())
        except Exception as exc:  # noqa: BLE001 - a violation, counted and reported
            violations += 1
            first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
            examples.append(f"seed {round_seed}: {type(exc).__name__}: {first}")
            program = "\n".join(getattr(exc, "__notes__", []))  # hypothesis's failing program
            print(
                f"[{kind}] seed {round_seed}: {type(exc).__name__}: {exc}\n{program}{out.getvalue()}"
            )
        round_seed += 1
        print(f"[{kind}] {tally['steps']:,}/{steps:,} steps, {violations} violations", flush=True)
    hypothesis.core.global_force_seed = None  # type: ignore[attr-defined]
    return {
        **tally,
        "violations": violations,
        "examples": examples[:5],
        "seeds": [seed, round_seed - 1],
        "seconds": round(time.monotonic() - started, 1),
    }


def git_head() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.model.soak", description=__doc__)
    parser.add_argument("--steps", type=int, default=2000, help="steps per backend")
    parser.add_argument("--backends", default="memory,sqlite,postgres")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="only check the docs region")
    parser.add_argument("--no-write", action="store_true", help="leave the docs alone")
    args = parser.parse_args(argv)
    if args.check:
        found = report.problems()
        for problem in found:
            print(problem, file=sys.stderr)
        return 1 if found else 0
    kinds = [k for k in args.backends.split(",") if k]
    rows: dict[str, Any] = {}
    for kind in kinds:
        db = PROVISIONS[kind].new(name="txs_model_soak")  # PostgreSQL: a schema of its own
        try:
            rows[kind] = soak_backend(kind, args.steps, args.seed, db.pg_schema)
        finally:
            asyncio.run(db.drop())
    data = {
        "command": "python -m tests.model.soak " + " ".join(argv or sys.argv[1:]),
        "commit": git_head(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "steps_per_program": STEPS_PER_PROGRAM,
        "programs_per_seed": PROGRAMS_PER_ROUND,
        "backends": rows,
    }
    print(report.render(data))
    if not args.no_write:
        report.write(data)
    return 1 if any(row["violations"] for row in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

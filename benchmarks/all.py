"""Every committed figure, one command: ``python -m benchmarks.all``.

Runs, one after the other, each in a process of its own:

1. ``python -m benchmarks`` (workloads (a)-(g); ``benchmarks/results/latest.*``; (g) measures
   LangGraph and ADK only where the ``bench-peers`` extra is installed, and
   ``--require-peers`` here makes a missing one fatal, as it does there),
2. ``python -m benchmarks.failover`` (``benchmarks/results/failover.json``; needs root),
3. ``python -m benchmarks.scale`` (``benchmarks/results/scale.json``),
4. ``python -m benchmarks.integrity`` (``benchmarks/results/integrity.*``),
5. ``python -m benchmarks.handoff`` (``benchmarks/results/handoff.*``),

then ``python -m benchmarks.docs``, which writes every figure into README.md and docs/.
Figures are only worth publishing from a quiet machine: this refuses to start while the
load average is above half the cores, unless ``--force``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = {
    "benchmarks": ["-m", "benchmarks", "--require-postgres"],
    "failover": ["-m", "benchmarks.failover"],
    "scale": ["-m", "benchmarks.scale"],
    "integrity": ["-m", "benchmarks.integrity"],
    "handoff": ["-m", "benchmarks.handoff"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.all", description=__doc__)
    parser.add_argument("--skip", nargs="+", choices=list(STEPS), default=[])
    parser.add_argument("--force", action="store_true", help="run even on a busy machine")
    parser.add_argument(
        "--require-peers",
        action="store_true",
        help="passed to python -m benchmarks: a peer that is not installed is fatal",
    )
    args = parser.parse_args(argv)
    steps = dict(STEPS)
    if args.require_peers:
        steps["benchmarks"] = [*STEPS["benchmarks"], "--require-peers"]
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load > cores / 2 and not args.force:
        print(
            f"load average {load:.2f} on {cores} cores: the machine is busy, figures would "
            "not be worth publishing (--force to run anyway)",
            file=sys.stderr,
        )
        return 2
    for name, command in steps.items():
        if name in args.skip:
            continue
        started = time.perf_counter()
        print(f"== {name}: python {' '.join(command)}", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, *command], cwd=ROOT, check=False)
        print(
            f"== {name}: exit {proc.returncode} after {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if proc.returncode != 0:
            return proc.returncode
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.docs"], cwd=ROOT, check=False
    ).returncode


if __name__ == "__main__":
    raise SystemExit(main())

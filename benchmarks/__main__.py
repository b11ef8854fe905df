"""``python -m benchmarks [--quick] [--out DIR] [--backends sqlite postgres] ...``"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from ._run import WORKLOADS, default_dsn, profile, run, write_results


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=(
            "Measure txsessions against the Agents SDK's sessions and raw-driver floors, "
            "in one process on the same data, and print ratios."
        ),
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes (under a minute): proves the benchmarks work; writes quick.md/json "
        "to a temporary directory unless --out is given",
    )
    parser.add_argument("--out", help="results directory (full runs: benchmarks/results)")
    parser.add_argument(
        "--backends", nargs="+", choices=["sqlite", "postgres"], default=["sqlite", "postgres"]
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(WORKLOADS),
        help="run only these workloads (a-e; f: the step-by-step breakdown; g: the peers, "
        "LangGraph, Google ADK and the SDK's SQLAlchemySession and AdvancedSQLiteSession)",
    )
    parser.add_argument(
        "--pg-dsn",
        default=default_dsn(),
        help="PostgreSQL DSN (default: env "
        "SESSIONS_BENCH_POSTGRES_DSN or SESSIONS_TEST_POSTGRES_DSN, else local)",
    )
    parser.add_argument(
        "--require-postgres",
        action="store_true",
        help="fail instead of skipping the PostgreSQL half when it cannot run",
    )
    parser.add_argument(
        "--require-peers",
        action="store_true",
        help="fail instead of reporting a peer of (g) as not installed "
        "(pip install 'txsessions[bench-peers]')",
    )
    parser.add_argument(
        "--profile",
        choices=["sqlite", "postgres"],
        help="instead of benchmarking, profile our commit-per-turn path with pyinstrument",
    )
    parser.add_argument("--profile-turns", type=int, default=2000)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.profile:
        text = asyncio.run(profile(args))
        print(text)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, f"profile_{args.profile}.txt"), "w") as fh:
                fh.write(text)
        return 0
    results = asyncio.run(run(args, argv))
    out_dir, text = write_results(results, args.out)
    print(text)
    print(f"results written to {out_dir}", file=sys.stderr)
    if not args.quick and args.out is None:
        from . import docs

        for path in docs.write():
            print(f"updated {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

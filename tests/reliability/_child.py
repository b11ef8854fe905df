"""Child processes for the reliability suite (each with its own event loop).

    python -m tests.reliability._child crash-writer URL SID WRITER
        commit batches WRITER/0, 1, 2, ... forever; print "+N" before batch N's commit
        and "N" after it returned (the parent SIGKILLs us at a random moment)
    python -m tests.reliability._child writer URL SHARED_SID WRITER_BASE TASKS BATCHES
        TASKS tasks; task t (writer WRITER_BASE + t) commits BATCHES batches to the
        shared session and to a session of its own; prints one JSON line at the end
    python -m tests.reliability._child popper URL SID
        autocommit pop_item until the session is empty; prints one JSON line
    python -m tests.reliability._child first-use URL SID WRITER
        waits for a line on stdin, then opens the (fresh) database and commits one batch

Every mode prints "ready" once imported, so the parent can start them together.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from sessions.errors import CommitConflictError

from .harness import open_url
from .invariant import make_batch, tag_of


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def ready_then_go() -> None:
    """Tell the parent we are ready, then wait for its "go" so children start together."""
    say("ready")
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def crash_writer(url: str, sid: str, writer: int) -> None:
    store = await open_url(url)
    session = store.session(sid)
    say("ready")
    for batch in range(1_000_000):
        await session.add_items(make_batch(writer, batch))
        say(f"+{batch}")
        await session.commit()
        say(str(batch))


async def writer(url: str, shared: str, base: int, tasks: int, batches: int) -> None:
    store = await open_url(url)
    await ready_then_go()

    async def one(w: int) -> dict[str, Any]:
        mine = store.session(f"{shared}-own-{w}")
        common = store.session(shared)
        for b in range(batches):
            await common.add_items(make_batch(w, b))
            await common.commit()
            await mine.add_items(make_batch(w, b))
            await mine.commit()
        return {"writer": w, "batches": batches}

    done = await asyncio.gather(*(one(base + t) for t in range(tasks)))
    await store.close()
    say(json.dumps({"done": done}))


async def popper(url: str, sid: str) -> None:
    store = await open_url(url)
    session = store.session(sid, autocommit=True)
    await ready_then_go()
    popped: list[list[int]] = []
    conflicts = 0
    for _ in range(100_000):
        try:
            item = await session.pop_item()
        except CommitConflictError:
            # The core already retried; the documented way on: roll back, read again.
            conflicts += 1
            await session.rollback()
            continue
        if item is None:
            break
        tag = tag_of(item)
        popped.append(list(tag) if tag else [-1, -1, -1, -1])
    await store.close()
    say(json.dumps({"popped": popped, "conflicts": conflicts}))


async def first_use(url: str, sid: str, writer_id: int) -> None:
    await ready_then_go()
    store = await open_url(url)
    session = store.session(sid)
    await session.add_items(make_batch(writer_id, 0))
    await session.commit()
    await store.close()
    say("ok")


def main(argv: list[str]) -> None:
    mode, url, *rest = argv
    if mode == "crash-writer":
        asyncio.run(crash_writer(url, rest[0], int(rest[1])))
    elif mode == "writer":
        asyncio.run(writer(url, rest[0], int(rest[1]), int(rest[2]), int(rest[3])))
    elif mode == "popper":
        asyncio.run(popper(url, rest[0]))
    elif mode == "first-use":
        asyncio.run(first_use(url, rest[0], int(rest[1])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])

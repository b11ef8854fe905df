"""A writer process for the cross-process check: ``python -m sessions.testing._child SPEC``.

``SPEC`` is JSON: ``factory`` (``"module:function"``) and ``args`` build the subject;
the child opens ``session_id``, prints ``ready``, waits for a line on stdin, then writes
``batches`` batches of ``size`` items as ``writer`` (committing each if the session is
buffered) and exits 0. Any failure: the traceback on stderr, exit status 1.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from typing import Any

from ._capabilities import is_buffered
from ._checks.base import batch_items
from ._subject import Subject


def load_subject(factory: str, args: list[str]) -> Subject:
    """Import ``module:function`` and call it with ``args``; it must return a Subject."""
    module_name, _, attr = factory.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    subject = target(*args)
    if not isinstance(subject, Subject):
        raise TypeError(f"{factory}(...) returned a {type(subject).__name__}, not a Subject")
    return subject


async def write(spec: dict[str, Any]) -> None:
    subject = load_subject(spec["factory"], spec["args"])
    async with subject.open(spec["session_id"]) as session:
        await session.get_items(limit=1)  # connected before saying so
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        for batch in range(spec["batches"]):
            await session.add_items(batch_items(spec["writer"], batch, spec["size"]))
            if is_buffered(session):
                await session.commit()


def main() -> None:
    asyncio.run(write(json.loads(sys.argv[1])))


if __name__ == "__main__":
    main()

"""Export a session, then import the file (its id changed to the destination) in one of
the three modes, as ``sessions export`` / ``sessions import`` do (docs/cli.md)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from sessions._tools.transfer import export_sessions, import_sessions

from .spec import CALL
from .strategies import TINY

if TYPE_CHECKING:
    from .machine import ModelMachine


def rewrite(path: str, dst_id: str, suffix: str | None) -> None:
    """The file's session becomes ``dst_id``; with ``suffix``, its items become new
    items (an append of the same items would repeat them)."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "session" in record:
                record["session"] = dst_id
            if record.get("type") == "item" and suffix is not None:
                item = record["item"]
                for key in ("content", "call_id"):
                    if key in item:
                        item[key] = f"{item[key]}/{suffix}"
            lines.append(json.dumps(record))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def export_then_import(
    machine: ModelMachine, store_index: int, src: str, dst: str, mode: str
) -> None:
    world, h = machine.world, machine.h
    source, target = world.s(src), world.s(dst)
    if not source.exists or source.info.get("ttl") == TINY:
        return
    ends_open = bool(target.items()) and target.items()[-1].get("type") == CALL
    if mode == "append" and ends_open:
        return
    machine.items.n += 1
    suffix = f"i{machine.items.n}" if mode == "append" else None
    path = os.path.join(h.tmp.name, f"export-{machine.items.n}.jsonl")
    store = h.stores[store_index]

    async def go() -> Any:
        await export_sessions(store, path, [h.rid(src)])
        rewrite(path, h.rid(dst), suffix)
        return await import_sessions(store, path, mode=mode)  # type: ignore[arg-type]

    items = [dict(i) for i in source.items()]
    if suffix is not None:
        for item in items:
            for key in ("content", "call_id"):
                if key in item:
                    item[key] = f"{item[key]}/{suffix}"
    info = {k: v for k, v in source.info.items() if v is not None}
    machine.run(go())
    world.import_into(dst, mode, items, info)

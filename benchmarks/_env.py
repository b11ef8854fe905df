"""Machine and version facts for the results header."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sqlite3
import sys
from importlib import metadata
from typing import Any


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    import psutil  # type: ignore[import-untyped]

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "loadavg_start": [round(x, 2) for x in load],
        "python": platform.python_version(),
        "python_impl": sys.implementation.name,
        "sqlite": sqlite3.sqlite_version,
        "txsessions": _version("txsessions"),
        "openai-agents": _version("openai-agents"),
        "aiosqlite": _version("aiosqlite"),
        "asyncpg": _version("asyncpg"),
        "sqlalchemy": _version("SQLAlchemy"),
    }


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []

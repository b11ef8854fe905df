"""Machine, version and source facts for the results header: detected, never assumed."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _cpu() -> dict[str, Any]:
    model = None
    hypervisor = False
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("model name") and model is None:
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and " hypervisor" in line:
            hypervisor = True
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "cpu": model or platform.processor() or platform.machine(),
        "virtualized": hypervisor,
    }


def _mount_of(path: str) -> tuple[str, str] | None:
    """``(mount point, filesystem type)`` of the mount holding ``path``."""
    best: tuple[str, str] | None = None
    real = os.path.realpath(path)
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = fields[4]
        if (real == point or real.startswith(point.rstrip("/") + "/")) and (
            best is None or len(point) > len(best[0])
        ):
            best = (point, right.split()[0])
    return best


def disk(path: str) -> dict[str, Any]:
    """What can be known about the disk under ``path`` (Linux sysfs; best effort)."""
    out: dict[str, Any] = {"path": path}
    mount = _mount_of(path)
    if mount:
        out["filesystem"] = mount[1]
    try:
        dev = os.stat(path).st_dev
    except OSError as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    sys_dev = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not os.path.exists(sys_dev):
        out["device"] = f"{os.major(dev)}:{os.minor(dev)} (not a block device: {mount})"
        return out
    real = os.path.realpath(sys_dev)
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)  # the whole disk holds the queue settings
    out["device"] = os.path.basename(real)
    out["bus"] = "virtio" if "/virtio" in real else ("nvme" if "/nvme" in real else "other")
    rotational = _read(os.path.join(real, "queue", "rotational"))
    if rotational is not None:
        out["rotational_flag"] = rotational
    cache = _read(os.path.join(real, "queue", "write_cache"))
    if cache is not None:
        out["write_cache"] = cache
    model = _read(os.path.join(real, "device", "model"))
    if model:
        out["model"] = model
    return out


def local_disk(path: str) -> dict[str, Any] | None:
    """:func:`disk` for ``path`` if it exists on this machine (a local server), else ``None``."""
    return disk(path) if os.path.isdir(path) else None


def fsync_latency(directory: str, rounds: int = 200) -> dict[str, float]:
    """Median and p90 microseconds of a 4 KiB write + ``fsync`` in ``directory``: what
    one durable commit costs at least on this disk, measured now."""
    fd, path = tempfile.mkstemp(prefix="txs-fsync-", dir=directory)
    times: list[float] = []
    try:
        block = b"x" * 4096
        for i in range(rounds):
            os.pwrite(fd, block, (i % 16) * 4096)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(path)
    times.sort()
    return {
        "median_us": round(statistics.median(times) * 1e6, 1),
        "p90_us": round(times[int(len(times) * 0.9)] * 1e6, 1),
        "rounds": float(rounds),
    }


def source() -> dict[str, Any]:
    """The commit measured, and whether the working tree differed from it."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # The code measured: the package, the benchmarks (not their results) and the
    # dependency pins. Changes elsewhere (docs) do not change what was measured.
    status = git("status", "--porcelain", "--untracked-files=no") or ""
    changed = [
        path
        for path in (line[3:] for line in status.splitlines())
        if path.startswith(("sessions/", "benchmarks/", "pyproject.toml"))
        and not path.startswith("benchmarks/results/")
    ]
    return {
        "commit": commit or "unknown (not a git checkout)",
        "subject": git("log", "-1", "--format=%s") if commit else None,
        "modified_files": changed,
    }


def machine() -> dict[str, Any]:
    import psutil  # type: ignore[import-untyped]

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        **_cpu(),
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

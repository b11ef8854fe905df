"""The spec checks, one module per group of capabilities; importing registers them."""

from . import backend, base, buffered, process

__all__ = ["backend", "base", "buffered", "process"]

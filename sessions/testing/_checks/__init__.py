"""The spec checks, one module per group of capabilities; importing registers them."""

from . import backend, base, buffered, process

__all__ = ["CHECK_MODULES"]

#: Every module of spec checks (importing them registered their checks).
CHECK_MODULES = (base, buffered, backend, process)

"""Progress through ``logging``: one logger per wing, ``lakestate.<wing>`` (``lakestate.run``, ``lakestate.ops``,
``lakestate.catalog``, ...; a top-level module's is ``lakestate``). A library call that says what it does (its
``say``, a run's ``progress``) says it at INFO to its wing's logger unless given a callable of its own; the
library's warnings go to the same loggers at WARNING. The ``lakestate`` commands print both (``cli``): INFO on
stdout, beside the one line a machine reads there, a run's ``[lakestate] summary: {...}`` (which the Airflow
operator reads), and warnings on stderr. From Python, configure logging as for any library::

    logging.basicConfig(level=logging.INFO)              # every wing's progress
    logging.getLogger("lakestate.run").setLevel("DEBUG")  # one wing's
"""
from __future__ import annotations

import logging

ROOT = "lakestate"


def wing_logger(module: str) -> logging.Logger:
    """The logger of the wing module ``module`` (a ``__name__``) is in: ``lakestate.<wing>``, or ``lakestate`` for a
    top-level module."""
    parts = module.split(".")
    return logging.getLogger(f"{ROOT}.{parts[1]}" if len(parts) > 2 else ROOT)

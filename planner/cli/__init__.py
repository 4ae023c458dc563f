"""The ``plan`` command line (typer): parses options, calls the library, renders or prints JSON.

``app`` holds the typer objects and ``main``; ``options`` declares every option once; the other
modules are the commands, which register themselves on ``app`` when imported here.
"""

# The commands register themselves when imported; this order is the order `plan --help` lists them.
# isort: off
from planner.cli import export, plan, catalog, validate, calibrate, serve  # noqa: F401

# isort: on
from planner.cli.app import OUTPUT_ERRNOS, app, entry, main, write_stdout
from planner.cli.inputs import adam_fields, moe_routing_fields, parse_count
from planner.cli.options import finite, positive_finite

__all__ = [
    "OUTPUT_ERRNOS",
    "adam_fields",
    "app",
    "entry",
    "finite",
    "main",
    "moe_routing_fields",
    "parse_count",
    "positive_finite",
    "write_stdout",
]

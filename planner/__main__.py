"""``python -m planner`` is the ``plan`` command."""

from planner.cli import entry

entry()

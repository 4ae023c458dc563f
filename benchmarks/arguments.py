"""The benchmark drivers' command lines end a bad argument as the planner's CLI ends bad input:
one line starting 'error:', exit code 2 (argparse prints its usage line first)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one 'error: <message>' line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)

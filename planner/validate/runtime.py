"""torch, imported only here and only when a replay runs; one-line errors when it is missing or
cannot serve the requested backend."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from types import ModuleType

from planner.errors import PlannerError, shown

STARTUP_S = 180.0
"""Allowance for every rank to start and join the process group (spawning, importing torch,
rendezvous) before the per-term timeout applies: tens of seconds when 4 ranks share 2 busy cores.
The world group's own timeout is at least this, so a slow starter does not fail the rendezvous;
every collective still waits at most the replay's timeout (``work.wait(timeout)``)."""

PR_SET_PDEATHSIG = 1
"""linux/prctl.h: deliver a signal to this process when its parent exits (prctl(2))."""

PARENT_POLL_S = 1.0


def die_with_parent(parent_pid: int) -> None:
    """Make a locally spawned rank end when the launcher does, however the launcher ends (SIGKILL
    included, when no ``finally`` runs): on Linux the kernel sends SIGKILL on the parent's exit
    (prctl PR_SET_PDEATHSIG); elsewhere a daemon thread checks the parent pid every
    ``PARENT_POLL_S``. A parent already gone before this runs (it died while the rank imported
    torch) ends the rank at once."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:
        os._exit(1)
    if not armed:

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(PARENT_POLL_S)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()


INSTALL_HINT = "pip install '.[validate]' (torch; see pyproject.toml for the CPU build)"


def require_torch() -> ModuleType:
    """``torch`` with torch.distributed, or a PlannerError saying how to install it."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise PlannerError(f"plan validate needs torch, which is not installed: {INSTALL_HINT}") from None
    if not dist.is_available():
        raise PlannerError(f"this torch build has no torch.distributed: {INSTALL_HINT}")
    return torch


def check_backend(backend: str) -> None:
    """Fail early, in one line, when ``backend`` cannot run here."""
    torch = require_torch()
    import torch.distributed as dist

    if backend == "gloo" and not dist.is_gloo_available():
        raise PlannerError("--backend gloo: this torch build has no gloo; allowed here: nccl on CUDA GPUs")
    if backend == "nccl" and not (torch.cuda.is_available() and dist.is_nccl_available()):
        raise PlannerError("--backend nccl needs CUDA GPUs and a torch build with NCCL; use --backend gloo on CPU")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the rendezvous of a local run)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun_world() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when started by torchrun (its environment variables), else None."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    world = _whole_number("WORLD_SIZE", os.environ["WORLD_SIZE"], 1)
    rank = _whole_number("RANK", os.environ["RANK"], 0)
    local_rank = _whole_number("LOCAL_RANK", os.environ.get("LOCAL_RANK", "0"), 0)
    if rank >= world:
        raise PlannerError(f"RANK {rank}: expected a rank below WORLD_SIZE {world} (torchrun sets both)")
    return rank, world, local_rank


def _whole_number(name: str, text: str, least: int) -> int:
    """A torchrun environment variable as a whole number of at least ``least``, or a one-line
    error naming it (int() of 'abc' was a ValueError traceback)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise PlannerError(f"{name} {shown(repr(text))}: expected a whole number >= {least} (torchrun sets it)")
    return value

"""Run a ReplayJob: spawn N local ranks and watch them (``--local-ranks``), or run this process
as one rank under torchrun.

The local launcher is the run's watchdog. Ranks report when they have joined the process group
and every term they enter and leave, each over its own pipe (a queue shared by the ranks has one
write lock, and a rank stopped while holding it would silence them all); the launcher polls their
exit codes and the pipes, and
ends the run (killing every rank) when a rank dies, reports an error, or nothing happens for
``timeout_s`` plus a grace period (``STARTUP_S`` before every rank has joined). The
error names the rank: a rank that died without a word (killed, crashed) first, then one that
went silent while the others reported errors (hung), then the first to report an error; and the
term it was in. Measurements received so far travel with the error (``ReplayFailedError.partial``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from planner.errors import PlannerError
from planner.validate.runtime import STARTUP_S, free_port, require_torch
from planner.validate.schemas import Measurement, ReplayJob

POLL_S = 0.1
GRACE_S = 10.0
"""Slack beyond the collective timeout before the watchdog calls a silent run hung: rank start-up
(importing torch) and group creation take a few seconds on a loaded 2-core machine."""

SETTLE_S = 1.0
"""After a first failure, how long to keep listening so the error can name the rank that caused
it rather than a peer that merely lost its connection to it."""


@dataclass(frozen=True)
class Event:
    """What a rank reported: kind ('ready', 'enter', 'leave', 'result', 'done', 'error'), the rank, its
    process id (for tests that kill it), the (block, term) position and the data."""

    kind: str
    rank: int
    pid: int | None
    position: tuple[int, int] | None
    data: Any


class ReplayFailedError(PlannerError):
    """A replay that did not finish; ``partial`` holds the measurements received before."""

    def __init__(self, message: str, partial: list[Measurement]) -> None:
        super().__init__(message)
        self.partial = partial


class ReplayInterruptedError(ReplayFailedError):
    """The user stopped the replay (Ctrl-C, SIGINT): the ranks are stopped, and what they measured
    before travels in ``partial`` like a failure's."""


INTERRUPTED = "interrupted (Ctrl-C) before every term was measured"


def is_stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, SIGTSTP: state T in /proc/<pid>/stat; Linux
    only, else never): a stopped rank is named at once instead of waiting out the start-up
    allowance."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[-1].split()
    except OSError:
        return False
    return bool(fields) and fields[0] in ("T", "t")


def _term_name(job: ReplayJob, position: tuple[int, int] | None) -> str:
    if position is None:
        return "start-up (before the first term)"
    block, term = position
    return f"term '{job.blocks[block].terms[term].name}' of '{job.blocks[block].label}'"


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Inbox:
    """The parent's ends of the ranks' pipes. A rank writes its events synchronously to its own
    pipe, so one rank's events arrive in the order it sent them and none waits on another rank; a
    pipe whose rank has exited (EOF) is dropped."""

    def __init__(self, readers: list[Connection]) -> None:
        self._open = dict(enumerate(readers))
        self._ready: list[tuple[int, Connection]] = []

    def get(self, timeout_s: float) -> tuple[str, int, Any] | None:
        """The next event (kind, rank, data), or None when none came within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            while self._ready:
                rank, conn = self._ready.pop(0)
                try:
                    kind, data = conn.recv()
                except (EOFError, OSError):
                    self._open.pop(rank, None)
                    continue
                return kind, rank, data
            left = deadline - time.monotonic()
            if not self._open or left <= 0:
                if not self._open:
                    time.sleep(max(left, 0.0))
                return None
            ready = set(wait(list(self._open.values()), timeout=left))
            self._ready = [(r, c) for r, c in self._open.items() if c in ready]


def run_local(job: ReplayJob, world_size: int, on_event: Callable[[Event], None] | None = None) -> list[Measurement]:
    """Spawn ``world_size`` ranks on 127.0.0.1, run ``job``, and return rank 0's measurements."""
    require_torch()
    import torch.multiprocessing as mp

    from planner.validate.worker import spawned_entry

    ctx = mp.get_context("spawn")
    pipes = [ctx.Pipe(duplex=False) for _ in range(world_size)]
    init_method = f"tcp://127.0.0.1:{free_port()}"
    payload = job.model_dump(mode="json")
    procs = [
        ctx.Process(
            target=spawned_entry,
            args=(payload, rank, world_size, init_method, pipes[rank][1], os.getpid()),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for proc, (_, writer) in zip(procs, pipes, strict=True):
        proc.start()
        writer.close()  # the rank holds the only write end: its exit is the pipe's EOF
    try:
        return _watch(job, procs, _Inbox([reader for reader, _ in pipes]), on_event)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for proc in procs:
            proc.join(timeout=5)
        for reader, _ in pipes:
            reader.close()


def _watch(
    job: ReplayJob, procs: list[Any], events: _Inbox, on_event: Callable[[Event], None] | None
) -> list[Measurement]:
    world = len(procs)
    results: list[Measurement] = []
    position: dict[int, tuple[int, int] | None] = dict.fromkeys(range(world))
    done: set[int] = set()
    ready: set[int] = set()
    joining: set[int] = set()
    stopped_since: dict[int, float] = {}
    errors: dict[int, str] = {}
    last_news = time.monotonic()
    failed_at: float | None = None
    try:
        while len(done) < world:
            event = events.get(POLL_S)
            if event is not None:
                kind, rank, data = event
                last_news = time.monotonic()
                if kind in ("enter", "leave"):
                    position[rank] = tuple(data) if kind == "enter" else position[rank]
                elif kind == "result":
                    data = Measurement.model_validate(data)
                    results.append(data)
                elif kind == "joining":
                    joining.add(rank)
                elif kind == "ready":
                    ready.add(rank)
                elif kind == "done":
                    done.add(rank)
                elif kind == "error":
                    errors[rank] = str(data)
                if on_event is not None:
                    on_event(Event(kind, rank, procs[rank].pid, position[rank], data))
            dead = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in done}
            now = time.monotonic()
            if (errors or dead) and failed_at is None:
                failed_at = now
            if failed_at is not None:
                waited, reported = now - failed_at, len(errors) + len(dead)
                # A dead rank is the culprit at once. Errors alone may be the others timing out on a
                # hung rank: wait (up to one collective timeout) until all but one have reported, so
                # that the silent one is named, not a slow reporter on a loaded machine.
                settled = waited > SETTLE_S and (dead or reported >= world - 1 or waited > job.timeout_s + SETTLE_S)
                if settled or reported >= world:
                    finished = 0 in errors or 0 in done
                    results += _drain(events, finished, procs[0], errors)
                    raise ReplayFailedError(_blame(job, procs, position, errors, dead), results)
            starting = len(ready) < world
            if starting and failed_at is None:
                # a rank stopped while the others wait to join: named after the replay's timeout,
                # not after the start-up allowance, which is for importing torch on a busy machine
                for r in range(world):
                    if r not in ready and is_stopped(procs[r].pid):
                        stopped_since.setdefault(r, now)
                    else:
                        stopped_since.pop(r, None)
                late = [r for r, since in stopped_since.items() if now - since > job.timeout_s]
                if late:
                    raise ReplayFailedError(
                        f"rank {late[0]} was stopped during start-up (process state T for {job.timeout_s:.0f} s, "
                        "the replay's timeout) while the others waited to join the process group",
                        results,
                    )
            allowance = STARTUP_S if starting else job.timeout_s + GRACE_S
            if failed_at is None and now - last_news > allowance:
                stuck = [r for r in range(world) if r not in (ready if starting else done)]
                if starting and joining:  # name the ranks that never reached the rendezvous, if some did
                    stuck = [r for r in stuck if r not in joining] or stuck
                ranks = f"rank{'s' if len(stuck) > 1 else ''} {', '.join(map(str, stuck))}"
                if starting:
                    raise ReplayFailedError(f"{ranks} did not join the process group within {STARTUP_S:.0f} s", results)
                raise ReplayFailedError(
                    f"{ranks} made no progress for {allowance:.0f} s in {_term_name(job, position[stuck[0]])} "
                    f"(timeout {job.timeout_s:.0f} s + {GRACE_S:.0f} s grace)",
                    results,
                )
        return results
    except KeyboardInterrupt:
        results += _drain(events, True, procs[0], errors)
        raise ReplayInterruptedError(INTERRUPTED, results) from None


DRAIN_S = 5.0
"""After a fault, how long at most to wait for rank 0's last measurements: a rank 0 still inside
the collective that failed reports its result or its own error within a poll or two; a hung rank
0 (which has sent all it measured long before) never does, and must not double the time to fail."""


def _drain(events: _Inbox, finished: bool, reporter: Any, errors: dict[int, str]) -> list[Measurement]:
    """Measurements still on their way when the run is stopped: rank 0 (``reporter``, the one
    rank that sends them) may finish a term after another rank's fault is seen; they belong in
    ``ReplayFailedError.partial``. A rank's events arrive in the order it sent them, so once rank
    0's own 'error' or 'done' is in (``finished``), or it has exited, everything it measured is:
    read until then and the pipes stay empty for one poll, for at most ``DRAIN_S``. Errors read on
    the way join ``errors``, so the blame sees them."""
    out: list[Measurement] = []
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline:
        event = events.get(POLL_S)
        if event is None:
            if finished or reporter.exitcode is not None:
                return out
            continue
        kind, rank, data = event
        if kind == "result":
            out.append(Measurement.model_validate(data))
        elif kind == "error":
            errors.setdefault(rank, str(data))
        finished = finished or (rank == 0 and kind in ("error", "done"))
    return out


def _blame(
    job: ReplayJob,
    procs: list[Any],
    position: dict[int, tuple[int, int] | None],
    errors: dict[int, str],
    dead: dict[int, int],
) -> str:
    """One line naming the rank that most likely caused the failure (module docstring)."""
    silent_dead = [r for r in dead if r not in errors]
    if silent_dead:
        r = silent_dead[0]
        return f"rank {r} died ({_exit_text(dead[r])}) in {_term_name(job, position[r])}; the run was stopped"
    hung = [r for r, p in enumerate(procs) if p.is_alive() and r not in errors]
    if errors and hung:
        r = hung[0]
        first_error = errors[min(errors)]
        return (
            f"rank {r} stopped responding in {_term_name(job, position[r])} "
            f"(the other ranks timed out waiting: {first_error})"
        )
    r = min(errors)
    return f"rank {r} failed in {_term_name(job, position[r])}: {errors[r]}"


def run_torchrun(job: ReplayJob, on_event: Callable[[Event], None] | None = None) -> list[Measurement]:
    """Run this process as one rank of a torchrun world (env:// rendezvous); rank 0 returns the
    measurements, the others an empty list. torchrun's agent ends the job if a rank dies; the
    process group's and every collective's timeout end a hang."""
    from planner.validate.runtime import torchrun_world

    world = torchrun_world()
    if world is None:
        raise PlannerError(
            "not started by torchrun (RANK and WORLD_SIZE unset): run under torchrun or give --local-ranks N"
        )
    rank, world_size, local_rank = world
    require_torch()
    import os

    import torch.distributed as dist

    from planner.validate.worker import init, run_job

    results: list[Measurement] = []
    position: list[tuple[int, int] | None] = [None]

    def emit(kind: str, data: Any) -> None:
        if kind == "enter":
            position[0] = tuple(data)
        if kind == "result":
            results.append(data)
        if on_event is not None:
            on_event(Event(kind, rank, os.getpid(), position[0], data))

    try:
        device = init(job, rank, world_size, local_rank, "env://")
        run_job(job, device, emit)
        dist.destroy_process_group()
    except KeyboardInterrupt:
        raise ReplayInterruptedError(INTERRUPTED, results) from None
    except PlannerError:
        raise
    except Exception as err:
        message = " ".join(str(err).split()) or type(err).__name__
        raise ReplayFailedError(f"rank {rank} failed in {_term_name(job, position[0])}: {message}", results) from None
    return results

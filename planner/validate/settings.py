"""The settings of a replay (``ReplaySettings``, ``ValidationSettings``) and the backends'
defaults: what `plan validate` and `plan validate sweep` take one option each for. Kept apart
from ``planner.validate.run`` so that the command line, which builds those options at start-up,
does not import the replay's report schemas (``planner.validate.schemas``) for every `plan`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from planner.schemas.base import Frozen

if TYPE_CHECKING:
    from planner.validate.schemas import ReplayBlock, ReplayJob


GLOO_DEFAULTS: dict[str, Any] = {"repeats": 5, "warmup": 1, "max_message_bytes": 8 * 2**20, "max_gemm_flops": 2e9}
"""CPU defaults: a 8 MiB gloo all-reduce takes ~10-20 ms and a 2 GFLOP fp32 GEMM ~30 ms on one
core (hardware_profiles/localhost-cpu.yaml), so a candidate replays in seconds."""

NCCL_DEFAULTS: dict[str, Any] = {"repeats": 20, "warmup": 5, "max_message_bytes": None, "max_gemm_flops": None}


MAX_TIMEOUT_S = 7 * 86400.0
"""The longest ``--timeout``: a week. torch.distributed keeps the timeout in milliseconds, and one
of 1e10 s (1e13 ms) made gloo's store client time out at once with C++ frames on stderr (1e308
overflowed a C int); no collective of a replay waits that long.
"""

MAX_LOCAL_RANKS = 128
"""The most processes ``--local-ranks`` spawns on one machine: each holds several descriptors
(pipes to the parent, gloo's sockets to every peer), and past a few hundred processes the usual
limit of 1,024 open files per process is reached; a CPU replay of a larger world says nothing a
smaller one does not. A bound, not a measurement."""


class ReplaySettings(Frozen):
    """Where and how a replay runs (`plan validate` and `plan validate sweep` take one option per
    field). Unset (None) counts take the backend's defaults (``GLOO_DEFAULTS``, ``NCCL_DEFAULTS``)."""

    backend: Literal["gloo", "nccl"] = Field(
        "gloo", description="gloo (CPU, laptops, CI) or nccl (GPUs, under torchrun)"
    )
    local_ranks: PositiveInt | None = Field(
        None,
        le=MAX_LOCAL_RANKS,
        description="Spawn N local ranks (gloo) instead of running under torchrun",
    )
    profile: str | None = Field(
        None,
        description="Hardware profile of the machine the replay runs on, which prices every prediction "
        "(default: localhost-cpu with gloo, the planned cluster's with nccl)",
    )
    repeats: PositiveInt | None = Field(None, description="Timed repeats per term (default 5 gloo, 20 nccl)")
    warmup: NonNegativeInt | None = Field(None, description="Untimed calls per term (default 1 gloo, 5 nccl)")
    timeout: float = Field(
        60.0,
        ge=1.0,
        le=MAX_TIMEOUT_S,
        description="Process-group and per-collective timeout, seconds (at most a week)",
    )

    def replay_job(self, blocks: list[ReplayBlock], gemm_on_all_ranks: bool) -> ReplayJob:
        """The job every rank runs: ``blocks`` with these settings."""
        from planner.validate.schemas import ReplayJob

        return ReplayJob(
            backend=self.backend,
            blocks=blocks,
            warmup=self.setting("warmup"),
            repeats=self.setting("repeats"),
            timeout_s=self.timeout,
            gemm_on_all_ranks=gemm_on_all_ranks,
        )

    def setting(self, name: str) -> Any:
        """The field ``name``, or where it is unset the backend's default."""
        value = getattr(self, name)
        return value if value is not None else (GLOO_DEFAULTS if self.backend == "gloo" else NCCL_DEFAULTS)[name]


class ValidationSettings(ReplaySettings):
    """A replay of a plan's meshes: the replay's settings, the caps that keep a CPU replay short,
    and whether to replay whole layer shards."""

    max_message_bytes: PositiveInt | None = Field(
        None,
        description="Replay larger messages at this size, counted as buckets (default 8MiB with gloo, none with nccl)",
    )
    max_gemm_flops: float | None = Field(
        None,
        ge=1.0,
        description="Replay GEMMs of more FLOPs than this cut to it, the reduction dim kept and M x N as square "
        "as the shape allows (default 2e9 with gloo, none with nccl)",
    )
    layer_shard: bool | None = Field(
        None,
        description="Also replay one transformer layer shard forward+backward per layer kind "
        "(default: on with nccl, off with gloo, where it runs in fp32 at CPU speed)",
    )

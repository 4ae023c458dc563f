"""Replays as library calls: ``run_validation`` replays a plan's candidates (or one pinned mesh) and
``run_sweep`` the alpha-beta sweep, each returning its report. `plan validate` and `plan validate
sweep` are these two with options, a progress bar and the report written to a file.

A replay is built first (``build_validation``, ``build_sweep``: the terms, each with its predicted
time, and the ``ReplayJob`` every rank runs), then run (``Replay.run``, with an optional callback
per rank event). torch is imported only when a replay is built or run (``planner.validate.runtime``,
``launch``), so importing this module, and ``plan`` itself, stay torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from planner.errors import PlannerError
from planner.validate.schemas import (
    Measurement,
    ReplayBlock,
    ReplayContext,
    ReplayJob,
    SweepPoint,
    SweepReport,
    TermSpec,
    ValidationReport,
)
from planner.validate.settings import ReplaySettings, ValidationSettings

if TYPE_CHECKING:
    from planner.schemas.hardware import ClusterSpec
    from planner.schemas.job import JobSpec
    from planner.schemas.model import ModelSpec
    from planner.schemas.parallel import ParallelConfig
    from planner.validate.launch import Event
    from planner.validate.report import CandidateInfo


@dataclass(frozen=True)
class ReplayMachine:
    """The world a replay runs in, whether this process leads it (writes the report and prints),
    and the replay's hardware as a cluster of ``world`` ranks, whose profile prices every prediction."""

    world: int
    lead: bool
    cluster: ClusterSpec
    profile_name: str
    profile_path: str | None = None


def replay_machine(settings: ReplaySettings, plan_cluster: ClusterSpec | None = None) -> ReplayMachine:
    """The local ranks, or torchrun's world, and the profile: ``settings.profile`` (a name or a
    file), else localhost-cpu with gloo and the planned cluster's with nccl (a sweep, which plans
    none, needs one with nccl). torch must be there (``check_backend``)."""
    from planner.catalog import load_cluster, load_profile
    from planner.validate.calibrate import is_cpu_profile
    from planner.validate.runtime import check_backend, torchrun_world

    check_backend(settings.backend)
    if settings.local_ranks is not None:
        if settings.backend == "nccl":
            raise PlannerError(
                "--local-ranks spawns gloo ranks on this machine; with --backend nccl run under torchrun"
            )
        world, lead = settings.local_ranks, True
    else:
        ranks = torchrun_world()
        if ranks is None:
            raise PlannerError(
                "give --local-ranks N to spawn N local ranks, or run under torchrun (RANK/WORLD_SIZE unset)"
            )
        world, lead = ranks[1], ranks[0] == 0
    path = None
    if settings.profile is not None:
        node = load_profile(settings.profile)
        path = str(Path(settings.profile).resolve()) if Path(settings.profile).is_file() else None
        if (settings.backend == "gloo") != is_cpu_profile(node):
            # as plan calibrate refuses to fit one to the other (check_measured_on): a review (2026-12-07)
            # replayed gloo on CPU priced on dgx-h100, 'the replay's hardware', at 310x its prediction
            gloo = settings.backend == "gloo"
            raise PlannerError(
                f"--profile {settings.profile}: {'a GPU' if gloo else 'a CPU'} profile, but --backend "
                f"{settings.backend} replays on {'CPU worker processes' if gloo else 'GPUs'}: price the replay on the "
                f"hardware it runs on ({'localhost-cpu or a profile calibrated from it' if gloo else 'the GPUs'})"
            )
    elif settings.backend == "gloo":
        node = load_profile("localhost-cpu")
    elif plan_cluster is not None:
        node = plan_cluster.profile
    else:
        raise PlannerError("--profile is required with --backend nccl (the profile of the GPUs the sweep runs on)")
    return ReplayMachine(world, lead, load_cluster(node.name if path is None else path, gpus=world), node.name, path)


def pins_name_one_mesh(pins: dict[str, Any]) -> bool:
    """Whether the pins give a degree, and so name one mesh as ``plan estimate`` reads them."""
    return any(axis in pins for axis in ("tp", "pp", "dp", "cp", "ep"))


def replay_candidates(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, pins: dict[str, Any], top: int
) -> list[tuple[int, ParallelConfig, float]]:
    """(rank, mesh, plan step time) of the meshes to replay: the one mesh that the degree pins name
    (as ``plan estimate`` reads them), else the search's top ``top``."""
    from planner.pricing import estimate_mesh
    from planner.search import pinned_mesh, search

    if pins_name_one_mesh(pins):
        config = pinned_mesh(pins, cluster.num_gpus, job)
        return [(1, config, estimate_mesh(model, cluster, job, config).step_time_s)]
    ranking = search(model, cluster, job, pins, top=top, try_module_sets=False)  # the replay runs one job
    return [(c.rank, c.config.parallel, c.step_time_s) for c in ranking.candidates]


Report = TypeVar("Report", ValidationReport, SweepReport)


@dataclass(frozen=True)
class Outcome(Generic[Report]):
    """What a replay run gave: the report (None on a rank that does not lead), how many of its
    terms were measured, and whether the user interrupted it (the report is then partial)."""

    report: Report | None
    measured: int
    total: int
    interrupted: bool


@dataclass(frozen=True)
class Replay(Generic[Report]):
    """A replay ready to run: the job every rank runs, the world it runs in, and what its report
    will say; ``run`` runs it."""

    job: ReplayJob
    machine: ReplayMachine
    settings: ReplaySettings
    caps: tuple[float | None, float | None]
    notes: list[str]

    @property
    def total(self) -> int:
        """Terms to measure."""
        return sum(len(b.terms) for b in self.job.blocks)

    def run(self, on_event: Callable[[Event], None] | None = None) -> Outcome[Report]:
        """Run the replay on the local ranks or under torchrun; a failure or Ctrl-C keeps what was
        measured before, in a report whose status is 'failed'."""
        from planner.validate import launch

        error, interrupted = None, False
        try:
            if self.settings.local_ranks is not None:
                measurements = launch.run_local(self.job, self.settings.local_ranks, on_event)
            else:
                measurements = launch.run_torchrun(self.job, on_event)
        except launch.ReplayFailedError as err:
            measurements, error = err.partial, str(err)
            interrupted = isinstance(err, launch.ReplayInterruptedError)
            if not self.machine.lead and not interrupted:  # no report to carry it: this rank says it
                raise PlannerError(error) from None
        report = self.report(measurements, error, self._context()) if self.machine.lead else None
        return Outcome(report, len(measurements), self.total, interrupted)

    def report(self, measurements: list[Measurement], error: str | None, context: ReplayContext) -> Report:
        raise NotImplementedError

    def _context(self) -> ReplayContext:
        from planner.validate.report import device_identity, host_and_time

        host, when = host_and_time()
        device_name, torch_version = device_identity(self.job.backend)
        return ReplayContext(
            host=host,
            created_at=when,
            backend=self.job.backend,
            device="cuda" if self.job.backend == "nccl" else "cpu",
            device_name=device_name,
            torch_version=torch_version,
            world_size=self.machine.world,
            replay_profile=self.machine.profile_name,
            replay_profile_path=self.machine.profile_path,
            warmup=self.job.warmup,
            repeats=self.job.repeats,
            timeout_s=self.job.timeout_s,
            max_message_bytes=self.caps[0],
            max_gemm_flops=self.caps[1],
            notes=self.notes,
        )


@dataclass(frozen=True)
class ValidationReplay(Replay[ValidationReport]):
    """A replay of a plan's candidates, one block each."""

    model_name: str
    plan_cluster: str
    candidates: list[CandidateInfo]

    def report(self, measurements: list[Measurement], error: str | None, context: ReplayContext) -> ValidationReport:
        from planner.validate.report import by_block, candidate_report, kendall_tau

        measured = by_block(measurements)
        reports = [
            candidate_report(info, block, measured.get(i, {}))
            for i, (info, block) in enumerate(zip(self.candidates, self.job.blocks, strict=True))
        ]
        return ValidationReport(
            status="failed" if error else "complete",
            error=error,
            model=self.model_name,
            plan_cluster=self.plan_cluster,
            context=context,
            candidates=reports,
            kendall_tau=kendall_tau(reports),
        )


@dataclass(frozen=True)
class SweepReplay(Replay[SweepReport]):
    """The sweep: one block of collectives, each term a point of the 'world' or the 'size' series."""

    series: list[str]

    def report(self, measurements: list[Measurement], error: str | None, context: ReplayContext) -> SweepReport:
        from planner.validate.report import term_result

        terms = self.job.blocks[0].terms
        points = [SweepPoint(series=self.series[m.term], result=term_result(terms[m.term], m)) for m in measurements]  # type: ignore[arg-type]
        return SweepReport(status="failed" if error else "complete", error=error, context=context, points=points)


def _layer_terms(
    model: ModelSpec, job: JobSpec, config: ParallelConfig, cluster: ClusterSpec, on_gpu: bool, timeout: float
) -> list[TermSpec]:
    """The candidate's layer-shard terms, refused in one line when one call would outlast half
    the per-call timeout (a llama-size layer on a CPU core takes minutes)."""
    from planner.validate.shard import layer_terms

    terms = layer_terms(model, job, config, cluster, on_gpu)
    for term in terms:
        if term.predicted_s > timeout / 2:
            raise PlannerError(
                f"--layer-shard: one {term.name} shard of {model.name} at {config.short()} is predicted at "
                f"{term.predicted_s:.3g} s per call on {cluster.profile.name}, over half the --timeout of "
                f"{timeout:g} s; raise --timeout or replay without it (--no-layer-shard)"
            )
    return terms


def build_validation(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    pins: dict[str, Any],
    settings: ValidationSettings,
    top: int = 3,
) -> ValidationReplay:
    """The replay of the meshes the plan ranks first (or of the one mesh the degree pins name):
    each candidate's collectives and GEMMs (and layer shards), fitted into the world at hand and
    priced on the replay's hardware profile."""
    from planner.validate.gemms import gemm_terms, replay_dtype
    from planner.validate.replica import fit_replica, replica_config
    from planner.validate.report import CandidateInfo
    from planner.validate.shard import counted_once
    from planner.validate.terms import comm_terms

    if model.is_hybrid and settings.layer_shard:
        raise PlannerError(
            f"--layer-shard: the layer shard is a transformer layer; {model.name}'s hybrid Mamba-2 layers replay "
            "their collectives and GEMMs only"
        )
    machine = replay_machine(settings, cluster)
    world, replay_cluster = machine.world, machine.cluster
    candidates = replay_candidates(model, cluster, job, pins, top)
    cap_bytes = settings.setting("max_message_bytes")
    cap_flops = settings.setting("max_gemm_flops")
    on_gpu = settings.backend == "nccl"
    with_layers = (on_gpu if settings.layer_shard is None else settings.layer_shard) and not model.is_hybrid
    blocks, infos = [], []
    for rank, config, step_s in candidates:
        replica_mesh, notes = fit_replica(config, world)
        terms = comm_terms(model, job, config, replica_config(config, replica_mesh), replay_cluster, cap_bytes)
        terms += gemm_terms(model, job, config, replay_cluster, on_gpu, cap_flops)
        if with_layers:
            terms = counted_once(terms + _layer_terms(model, job, config, replay_cluster, on_gpu, settings.timeout))
        blocks.append(ReplayBlock(label=f"#{rank} {config.short()}", mesh=replica_mesh, terms=terms))
        infos.append(
            CandidateInfo(rank=rank, mesh=config.short(), plan_step_time_s=step_s, replica=replica_mesh, notes=notes)
        )
    cores = os.cpu_count() or 1
    replay_job = settings.replay_job(blocks, gemm_on_all_ranks=on_gpu or world <= cores)
    priced = f"every predicted_s is priced on {machine.profile_name}, the replay's hardware"
    notes = [f"{priced}; plan_step_time_s on {cluster.name}"]
    if top > 1 and pins_name_one_mesh(pins):
        # a review (2026-12-08): --top 2 beside --tp 2 --pp 2 replayed one mesh without a word
        notes.append(f"the degree pins name one mesh, so it alone is replayed (--top {top} ranks a search's meshes)")
    if (replayed := replay_dtype(job, on_gpu)) != job.dtype:
        # a review: gpt2 on CPU showed a plan step of 7.98e+05 s (bf16 at the CPU's emulated rate) over
        # a replay priced at 2.74e+03 s (fp32), with nothing saying why the two differ 290x
        notes.append(
            f"the plan prices {job.dtype} and the replay runs {replayed} (gemms.replay_dtype), so plan_step_time_s "
            f"and the replay time per step differ by the profile's {job.dtype} and {replayed} rates, not by a miss"
        )
    if not replay_job.gemm_on_all_ranks:
        notes.append(
            f"{world} ranks share {cores} CPU cores: GEMMs are timed on rank 0 alone, the others waiting; the "
            "collectives run on every rank at once and time-slice the cores, so their measured times hold that "
            "contention (calibrating from them fits this machine under load, not its links)"
        )
    if with_layers:
        notes.append(
            "layer.* terms replay one layer shard forward+backward each; the GEMMs inside it (*) are "
            "reported but counted once, through the layer"
        )
    if model.is_hybrid:
        notes.append(
            f"{model.name} is a hybrid Mamba-2 model: its collectives and GEMMs (Mamba in_proj and out_proj "
            "among them) are replayed, not a layer shard, and not the Mamba-2 scan and convolution"
        )
    capped = [
        t.name
        for b in blocks
        for t in b.terms
        if t.plan_message_bytes > t.message_bytes or t.plan_gemm_mnk != t.gemm_mnk
    ]
    if capped:
        notes.append(
            f"{len(capped)} terms capped (--max-message-bytes {cap_bytes}, --max-gemm-flops {cap_flops}); "
            "calls per step count the buckets"
        )
    return ValidationReplay(
        replay_job, machine, settings, (cap_bytes, cap_flops), notes, model.name, cluster.name, infos
    )


def run_validation(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    pins: dict[str, Any] | None = None,
    settings: ValidationSettings | None = None,
    top: int = 3,
    on_event: Callable[[Event], None] | None = None,
) -> Outcome[ValidationReport]:
    """Replay the plan's ``top`` candidates for ``model`` on ``cluster`` (or the one mesh the
    degree pins name) and report measured vs predicted: ``build_validation``, then ``run``."""
    return build_validation(model, cluster, job, pins or {}, settings or ValidationSettings(), top).run(on_event)


def build_sweep(ops: list[str], sizes: list[int], size: int, settings: ReplaySettings) -> SweepReplay:
    """Each collective of ``ops`` at ``size`` bytes over groups of 2..N ranks, and at N ranks at
    each of ``sizes``: the terms, priced on the replay's profile (required with nccl)."""
    from planner.validate.sweep import sweep_terms

    machine = replay_machine(settings)
    terms, series = sweep_terms(ops, sizes, size, machine.world, machine.cluster)
    job = settings.replay_job([ReplayBlock(label="sweep", terms=terms)], gemm_on_all_ranks=True)
    notes = [f"groups are ranks 0..n-1 of the world; predictions priced on {machine.profile_name}"]
    return SweepReplay(job, machine, settings, (None, None), notes, series)


def run_sweep(
    ops: list[str],
    sizes: list[int],
    size: int,
    settings: ReplaySettings | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> Outcome[SweepReport]:
    """``build_sweep``, then ``run``: measured vs the alpha-beta prediction of each point."""
    return build_sweep(ops, sizes, size, settings or ReplaySettings()).run(on_event)

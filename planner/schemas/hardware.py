"""Hardware schemas: a GPU, an interconnect tier, a node profile and a cluster.

YAML keys carry their unit (``_gib``, ``_tb_per_s``, ``_gb_per_s``, ``_us``, ``tflops``); the
``*_bytes``, ``*_bytes_per_s``, ``*_s`` and ``*_flops_per_s`` properties give SI values, which is
all the cost engine reads. Every number in a profile names its source in ``sources``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from planner.errors import PlannerError
from planner.schemas.base import GB_BYTES, GIB_BYTES, TB_BYTES, TERA, Frozen, integer_shown

Dtype = Literal["bf16", "fp16", "fp8", "fp4", "tf32", "fp32"]
"""Numeric formats whose dense peak FLOP/s a GPU may list (fp4: NVFP4/MXFP4 on Blackwell's
fifth-generation tensor cores)."""

BYTES_PER_ELEMENT: dict[str, float] = {"bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5, "tf32": 4, "fp32": 4}
"""Storage size of one element of each format (tf32 is stored as fp32; fp4 is E2M1, half a byte,
its block scales counted where they are written: ``compute.cast_bytes_per_element``)."""


FLASH_FWD_BWD_FLOPS = 3.5
"""FlashAttention's accounting: backward = 2.5x forward FLOPs, so forward + backward = 3.5x
(Dao 2023, 'FlashAttention-2', section 4.1; FlashAttention-3 section 4.1 likewise). Declared with
the profiles' attention figures, which are read in it; ``cost.compute`` prices with it."""

ATTENTION_REFERENCE_HEAD_DIM = 128
"""Head dim at which every profile's attention efficiency is read: the FlashAttention-2 (Dao
2023, Fig. 4(d)), FlashAttention-3 (Shah et al. 2024, Figs. 5-6) and FlashAttention-4 / Colfax
figures the profiles cite are all head dim 128."""


def exp_time_per_flop(tensor_flops_per_exp: float, d_qk: float, d_v: float, forward_only: bool = False) -> float:
    """Time of a flash kernel's exponentials over the time of its counted FLOPs, both at the GPU's
    full rates: one exponential per score forward (softmax) and one backward (the scores are
    recomputed, P = exp(S - L)), against the FLOPs per score the planner counts: 2(d_qk + d_v)
    forward, ``FLASH_FWD_BWD_FLOPS`` times that forward + backward.
    FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608, section 3.1): "the H100 SXM5 GPU has 989
    TFLOPS of FP16 matmul but only 3.9 TFLOPS of special functions", so at head dim 128 the
    exponentials take half the matmuls' time forward. Priced as serial with the rest of the kernel
    (``GPU.attention_efficiency_at``), it reproduces the measured head-dim ratios of the FA3 paper
    (H100 forward at 16k, head dim 64 against 128: 473 / 648 TFLOPS = 0.73 measured; from 648 at
    128 it gives 488 at 64, 0.75) and of FlashAttention-4 on B200 (forward at 4k: 708 / 1062 = 0.67
    measured, Dao-AILab/flash-attention#2605; 721 / 1062 = 0.68 so), and NVIDIA's Blackwell Ultra
    forward gain from SFUs of twice the rate (1.35x measured on GB300 against GB200, 'Making
    Softmax More Efficient with NVIDIA Blackwell Ultra'; 1.3x so from a forward efficiency near
    0.5)."""
    per_score = 2.0 * (d_qk + d_v) * (1.0 if forward_only else FLASH_FWD_BWD_FLOPS)
    exps = 1.0 if forward_only else 2.0
    return tensor_flops_per_exp * exps / per_score


FP8_BLOCK_SCALING_ARCHITECTURES = frozenset({"hopper", "blackwell", "blackwell-gb202"})
"""Architectures whose tensor cores run block-scaled fp8: Transformer Engine's support matrix
(nvidia.github.io/TransformerEngine/support_matrix.html, 'Format support by compute capability')
lists FP8 block scaling (``Float8BlockScaling``, DeepSeek-V3's 1 x 128 and 128 x 128 tiles) from
compute capability 9.0, Hopper and every Blackwell, and per-tensor fp8 alone on Ada (8.9); MXFP8 is
one of these (below). AMD's CDNA3 (MI300X) has no MX or block-scaled fp8 in that matrix or in
torchao's MX training (SM100 kernels)."""

MXFP8_ARCHITECTURES = frozenset({"blackwell"})
"""Architectures with MXFP8 tensor cores (an E8M0 scale per 32 elements): the same matrix lists
``MXFP8BlockScaling`` on data-centre Blackwell alone (compute capability 10.0 and 10.3: B200,
B300, GB200, GB300), not on Hopper or the workstation GB202 (12.0); torchao's MX training
(torchtitan's ``quantize.linear.mx``) needs SM100 too. Elsewhere block scaling is the 128-element
tiles (Megatron ``--fp8-recipe blockwise``)."""

NON_TN_FP8_ARCHITECTURES = frozenset({"blackwell"})
"""Architectures whose cuBLAS fp8 GEMMs take operands in any layout, so no transposed fp8 copy is
made for the backward GEMMs where the stack uses that (``Stack.fp8_non_tn_gemms``): Transformer
Engine's ``is_non_tn_fp8_gemm_supported`` (transformer_engine/pytorch/utils.py) holds for compute
capability 10.0-11.x and 13.0 on: data-centre Blackwell (B200, GB200 10.0; B300, GB300 10.3), not
Hopper (9.0, TN only) nor the workstation GB202 (12.0)."""


def check_sources(obj: Frozen, sources: dict[str, str], skip: set[str], required: set[str] = frozenset()) -> None:
    """Every numeric field set on ``obj``, and every ``required`` field set whatever its type,
    must name its source; every source must name a field."""
    fields = type(obj).model_fields
    unknown = sorted(set(sources) - set(fields))
    if unknown:
        raise ValueError(f"sources name unknown field(s) {unknown}; allowed: {sorted(fields)}")
    for name in fields:
        value = getattr(obj, name)
        if name in skip or value is None or name in sources:
            continue
        if isinstance(value, (int, float, dict, list)) and not isinstance(value, bool):
            raise ValueError(f"number '{name}' has no entry in 'sources' (datasheet, paper or measurement)")
        if name in required:
            raise ValueError(f"'{name}' has no entry in 'sources' (the code, docs or measurement that says so)")


MIN_EFFICIENCY = 0.01
"""The smallest achieved fraction of a peak a profile may state (GEMM, attention and HBM
efficiencies, the sustained tensor fraction, fp8 kernel fractions, link bus efficiencies): a
hundredth, far below any kernel the profiles hold (the slowest, FlashAttention-2 on GB200 and
GB300, at 0.14), so that a mistyped 1e-300 fails when the profile loads instead of pricing a
step of 1e300 s. A bound, not a measurement."""

MIN_RATE = 1e-6
"""The smallest peak (TFLOP/s) or bandwidth (HBM TB/s, link GB/s) a profile may state: a millionth
of its unit (1 MFLOP/s, 1 MB/s, 1 kB/s), far below any machine (the CPU profile's measured
one-thread bf16 matmul, 0.000275 TFLOP/s, is 275x it): a bound, not a measurement, so that a
mistyped 1e-300 fails when the profile loads instead of pricing a step of 1e301 s with numpy's
overflow warning on stderr."""

MAX_RATE = 1e9
"""The largest peak or bandwidth a profile may state: a billion of its unit (1e9 TFLOP/s, 1e9 TB/s
of HBM, 1e9 GB/s of link), some 60,000x the largest shipped (B300's 15,000 TFLOP/s of fp4): a
bound, so that a mistyped 1e300 fails when the profile loads instead of pricing a 0.0% MFU."""

Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE, allow_inf_nan=False)]
"""A peak or bandwidth a profile states: finite, from ``MIN_RATE`` to ``MAX_RATE``."""

MAX_HBM_CAPACITY_GIB = 1e6
"""The most memory a profile may give one GPU, GiB (a million: a PiB per GPU, some 3,700x the
largest shipped, B300's 268.6 GiB): a bound, not a measurement, so that a mistyped 1e300 fails when
the profile loads, by name, instead of the estimate coming out infinite memory."""

MAX_CLUSTER_GPUS = 2**20
"""The largest cluster planned, 1,048,576 GPUs: several times the largest built (publicly
reported training clusters hold about 100,000-200,000 GPUs in 2025), so no real plan is refused,
while a mistyped node count fails at once instead of enumerating a billion meshes. A bound, not
a measurement."""


MAX_COMPUTE_UNITS = 1_000_000
"""The most SMs or CUs a profile may give one GPU (a million, some 3,300x the largest shipped,
MI300X's 304): a bound, not a measurement, so that a mistyped 10**15 fails when the profile loads
instead of wave-quantising every GEMM into a step of 1e12 s."""

MAX_FLOPS_PER_EXP = 1e6
"""The most tensor FLOPs per exponential a profile may state (the shipped parts 64-512): a bound
against typos, as ``MAX_COMPUTE_UNITS``."""

MAX_POINT_TO_POINT_LINKS = 4096
"""The most point-to-point links a switchless domain may give one GPU (MI300X's mesh has 7): a
bound against typos; a domain of n GPUs fully connected has n - 1 (checked with its size)."""

MAX_GEMM_GFLOP = 1e9
"""The largest GEMM a ``gemm_efficiency_curve`` point may name, GFLOP (1e18 FLOPs, hours on any
GPU): a bound against typos (1e300 overflowed numpy when the curve was read)."""


class GPU(Frozen):
    """One accelerator: memory, bandwidth and dense (not 2:4 sparse) peak throughput.

    ``peak_tflops`` maps a format to dense TFLOP/s as the vendor datasheet gives it.
    ``reserved_memory_gib`` is what the CUDA/ROCm context, NCCL buffers and allocator
    fragmentation take before any tensor of the model: HBM the planner may not fill.
    ``gemm_efficiency`` is the fraction of peak that large, well-shaped GEMMs reach in practice
    (measured; the cost engine lowers it further for skinny shapes). ``compute_units`` (SMs or
    CUs) sets the wave quantization of GEMM tiles; ``gemm_efficiency_curve``, where measured,
    makes the efficiency depend on GEMM size. ``hbm_efficiency`` is the fraction of the
    datasheet HBM bandwidth a streaming copy reaches (BabelStream), what memory-bound ops get.
    """

    name: str
    architecture: str | None = Field(
        None,
        description="The GPU's architecture generation (ampere, hopper, blackwell, cdna3, ...): kernels are "
        "written per architecture, so a fitted kernel parameter needs runs on two of them",
    )
    hbm_capacity_gib: float = Field(gt=0, le=MAX_HBM_CAPACITY_GIB, allow_inf_nan=False)
    hbm_bandwidth_tb_per_s: Rate
    peak_tflops: dict[Dtype, Rate]
    reserved_memory_gib: float = Field(ge=0)
    gemm_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)
    hbm_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)
    attention_efficiency: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Fused (flash) attention forward+backward throughput as a fraction of 16-bit peak, "
        "FlashAttention's FLOP convention; None: gemm_efficiency",
    )
    gemm_efficiency_fp8: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Fraction of the fp8 peak large fp8 GEMMs reach (measured fp8 GEMMs run further below their "
        "peak than 16-bit ones); None: gemm_efficiency",
    )
    fp8_rowwise_gemm_fraction: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Fitted: rate of row-wise scaled fp8 GEMMs (torch._scaled_mm with per-row scales, CUTLASS "
        "kernels on Hopper) relative to tensor-wise scaled ones; None: not calibrated, 1",
    )
    fp8_block_gemm_fraction: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Fitted: rate of block-scaled fp8 GEMMs (MXFP8 1x32 blocks on Blackwell, Transformer Engine's "
        "MXFP8BlockScaling recipe on Blackwell) relative to tensor-wise scaled ones, the quantise kernels that "
        "write both row- and column-wise copies with their scales included; None: not calibrated, 1",
    )
    gemm_efficiency_fp4: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Fraction of the dense fp4 peak large NVFP4 GEMMs (E2M1 with an E4M3 scale per 16 "
        "elements) reach, scales included; None: gemm_efficiency",
    )
    attention_efficiency_fa2: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="FlashAttention-2 (flash-attn 2, PyTorch SDPA's flash backend) forward+backward as a fraction "
        "of 16-bit peak, where it differs from the GPU's best fused kernel; None: attention_efficiency",
    )
    tensor_flops_per_exp: float | None = Field(
        None,
        gt=0,
        le=MAX_FLOPS_PER_EXP,
        allow_inf_nan=False,
        description="16-bit dense tensor-core FLOPs per exponential the special function units compute in the "
        "same time (per SM and clock): softmax's exponentials run on the SFUs (MUFU.EX2), far slower than the "
        "tensor cores, so attention at a small head dim, with fewer FLOPs per score, runs below the profile's "
        "head-dim-128 figure (``attention_efficiency_at``); None: no head-dim adjustment",
    )
    sdpa_kernel: Literal["fa2", "fused"] = Field(
        "fa2",
        description="What PyTorch's scaled_dot_product_attention runs here for torchtitan-style callers: "
        "'fa2' (its FLASH backend) or 'fused' (cuDNN, preferred on Blackwell)",
    )
    gemm_efficiency_curve: (
        list[tuple[Annotated[float, Field(gt=0, le=MAX_GEMM_GFLOP)], Annotated[float, Field(ge=MIN_EFFICIENCY, le=1)]]]
        | None
    ) = Field(
        None,
        description="Measured (GFLOP per GEMM, efficiency) points, tile-quantization removed; replaces "
        "gemm_efficiency for GEMMs, interpolated in log(FLOPs) and clamped at the ends",
    )
    compute_units: int | None = Field(
        None,
        gt=0,
        le=MAX_COMPUTE_UNITS,
        description="SMs (NVIDIA) or CUs (AMD) a GEMM's tiles are spread over; None: no wave quantization",
    )
    host_link_gb_per_s: Rate | None = Field(
        None,
        description="GB/s one GPU moves to or from host memory in one direction while every GPU of the node does "
        "(activation offloading, ``ParallelConfig.offload_layers``); None: not priced, no offloading planned",
    )
    host_memory_gib: float | None = Field(
        None,
        gt=0,
        le=MAX_HBM_CAPACITY_GIB,
        allow_inf_nan=False,
        description="Host memory per GPU (its CPU's memory over the GPUs sharing it) that offloaded activations "
        "may fill, less ``memory.HOST_MEMORY_RESERVE``; needed with host_link_gb_per_s",
    )
    sustained_tensor_fraction: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="Tensor-core throughput a training run sustains, as a fraction of what a short benchmark "
        "(MAMF, the FlashAttention figures) reaches: clocks drop with every GPU of the node at its power cap for "
        "hours. Fitted by `plan calibrate --from-runs` (see the profile's calibration); None: a profile loaded "
        "from a file takes its calibrated_like donor's, else the median of the shipped fitted ones "
        "(catalog.with_sustained_default); 1 for a GPU built in code",
    )
    sources: dict[str, str]

    @model_validator(mode="after")
    def _sources_and_bf16(self) -> GPU:
        if "bf16" not in self.peak_tflops and "fp16" not in self.peak_tflops:
            # a 16-bit job falls back to no other rate: fp32's is 4-16x below a tensor core's 16-bit
            # one (L40S 91.6 vs 362, H100 SXM 67 vs 989 TFLOPS) and 258x above an emulated CPU bf16
            # (localhost-cpu: 70.9 vs 0.275 GFLOP/s)
            raise ValueError("peak_tflops must list bf16 (or fp16): the 16-bit rate a bf16 job is priced at")
        if self.reserved_memory_gib >= self.hbm_capacity_gib:
            raise ValueError("reserved_memory_gib must be below hbm_capacity_gib")
        if self.host_link_gb_per_s is not None and self.host_memory_gib is None:
            raise ValueError("host_link_gb_per_s needs host_memory_gib: offloaded activations must fit host memory")
        curve = self.gemm_efficiency_curve or []
        if any(not 0 < eff <= 1 for _, eff in curve):
            raise ValueError("gemm_efficiency_curve efficiencies must lie in (0, 1]")
        if [g for g, _ in curve] != sorted({g for g, _ in curve}):
            raise ValueError("gemm_efficiency_curve must list strictly increasing GFLOP sizes")
        check_sources(self, self.sources, skip={"sources", "name"}, required={"architecture"})
        return self

    @property
    def sustained(self) -> float:
        """``sustained_tensor_fraction``, 1 where the profile has none."""
        return self.sustained_tensor_fraction or 1.0

    def gemm_efficiency_for(self, dtype: str) -> float:
        """Large-GEMM efficiency for the matmul format: ``gemm_efficiency_fp8`` for fp8 and
        ``gemm_efficiency_fp4`` for fp4 where measured, else ``gemm_efficiency``."""
        measured = {"fp8": self.gemm_efficiency_fp8, "fp4": self.gemm_efficiency_fp4}.get(dtype)
        if measured is not None and dtype in self.peak_tflops:
            return measured
        return self.gemm_efficiency

    def runs_fp8_scaling(self, fp8_scaling: str) -> bool:
        """Whether the GPU's tensor cores run fp8 at this scaling granularity: block scaling needs an
        architecture of ``FP8_BLOCK_SCALING_ARCHITECTURES`` (a profile that names none is taken at
        its word); per-tensor and per-row scaling run wherever fp8 does."""
        known = self.architecture is not None
        return fp8_scaling != "block" or not known or self.architecture in FP8_BLOCK_SCALING_ARCHITECTURES

    @property
    def has_mxfp8(self) -> bool:
        """Whether block-scaled fp8 runs as MXFP8 here (``MXFP8_ARCHITECTURES``), else as 128-element tiles."""
        return self.architecture in MXFP8_ARCHITECTURES

    def gemm_efficiency_ratio(self, dtype: str, fp8_scaling: str = "tensor") -> float:
        """``gemm_efficiency_for(dtype)`` relative to ``gemm_efficiency``: scales the size curve,
        which is measured in 16-bit, to the format (and, for row-scaled fp8, to its kernels)."""
        ratio = self.gemm_efficiency_for(dtype) / self.gemm_efficiency
        if dtype == "fp8" and fp8_scaling == "row":
            ratio *= self.fp8_rowwise_gemm_fraction or 1.0
        if dtype == "fp8" and fp8_scaling == "block":
            ratio *= self.fp8_block_gemm_fraction or 1.0
        return ratio

    def attention_efficiency_for(self, kernel: str) -> float:
        """Fused attention efficiency of ``kernel`` ('fa2'; 'fused', the GPU's best fused kernel:
        cuDNN/FlashAttention-3 on Hopper; 'sdpa', whichever of the two ``sdpa_kernel`` says PyTorch
        SDPA runs here); falls back to ``attention_efficiency``, then to ``gemm_efficiency``."""
        best = self.attention_efficiency or self.gemm_efficiency
        if kernel == "sdpa":
            kernel = self.sdpa_kernel
        if kernel == "fa2" and self.attention_efficiency_fa2 is not None:
            return self.attention_efficiency_fa2
        return best

    def attention_efficiency_at(
        self, kernel: str, d_qk: float, d_v: float, forward_only: bool = False, fp8: bool = False
    ) -> float:
        """``attention_efficiency_for(kernel)`` at query/key head dim ``d_qk`` and value head dim
        ``d_v`` instead of the figure's ``ATTENTION_REFERENCE_HEAD_DIM`` (forward alone, or forward
        + backward): the exponentials' time is added to, or taken from, the kernel's time per FLOP,
        1/eff(d) = 1/eff(128) + x(d) - x(128), x = ``exp_time_per_flop`` (``tensor_flops_per_exp``),
        never above the larger of the figure and ``gemm_efficiency`` (a kernel of two GEMMs and a
        softmax does not outrun a lone GEMM: absorbed MLA decode, 576 + 512, would otherwise pass 1
        on B200). Unchanged where the profile gives no SFU rate.

        ``fp8``: the kernel's two GEMMs in fp8 (an FP8 FMHA: e4m3 Q, K and V), still as a fraction
        of the 16-bit peak: the same serial split with the matmul share sped up by the fp8/16-bit
        peak ratio r and the exponentials not, 1/eff8 = (1/eff - x)/r + x, so where the SFUs bound
        the kernel fp8 buys little (B200 at head dim 128 forward: 1.29x; H100: 1.56x); never below
        the 16-bit figure, never above the fp8 GEMMs' (r x ``gemm_efficiency_for('fp8')``). Checked
        against FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608, abstract), H100 forward at
        head dim 256: 16-bit 'up to 740 TFLOPs/s', fp8 'close to 1.2 PFLOPs/s', a 1.62x gain where
        this gives 1.72x (644 and 1,108 TFLOP/s from the H100 profile's 0.56 at 128, each 8-13%
        under those maxima): about 6% optimistic on the gain. No gain where the profile gives no SFU
        rate or no fp8 peak (a claim the profile cannot back)."""
        efficiency = self.attention_efficiency_for(kernel)
        if self.tensor_flops_per_exp is None:
            return efficiency
        ref = ATTENTION_REFERENCE_HEAD_DIM
        x = exp_time_per_flop(self.tensor_flops_per_exp, d_qk, d_v, forward_only)
        delta = x - exp_time_per_flop(self.tensor_flops_per_exp, ref, ref, forward_only)
        efficiency = min(1.0 / (1.0 / efficiency + delta), max(efficiency, self.gemm_efficiency))
        if not fp8 or "fp8" not in self.peak_tflops:
            return efficiency
        ratio = self.peak_flops_per_s("fp8") / self.peak_flops_per_s("bf16")
        fp8_efficiency = 1.0 / (max(1.0 / efficiency - x, 0.0) / ratio + x)
        return min(max(fp8_efficiency, efficiency), ratio * self.gemm_efficiency_for("fp8"))

    def gemm_efficiency_at(self, flops: np.ndarray) -> np.ndarray:
        """Achievable fraction of peak for GEMMs of ``flops`` FLOPs: the measured curve when the
        profile has one (log-linear between points, flat beyond), else ``gemm_efficiency``."""
        if not self.gemm_efficiency_curve:
            return np.full(np.shape(flops), self.gemm_efficiency)
        sizes, effs = zip(*self.gemm_efficiency_curve, strict=True)
        return np.interp(np.log10(np.maximum(flops, 1.0)), np.log10(np.array(sizes) * 1e9), np.array(effs))

    @property
    def hbm_capacity_bytes(self) -> float:
        return self.hbm_capacity_gib * GIB_BYTES

    @property
    def reserved_memory_bytes(self) -> float:
        return self.reserved_memory_gib * GIB_BYTES

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_tb_per_s * TB_BYTES

    @property
    def host_memory_bytes(self) -> float | None:
        return None if self.host_memory_gib is None else self.host_memory_gib * GIB_BYTES

    @property
    def host_link_bytes_per_s(self) -> float | None:
        return None if self.host_link_gb_per_s is None else self.host_link_gb_per_s * GB_BYTES

    @property
    def achieved_hbm_bytes_per_s(self) -> float:
        """What streaming kernels reach: datasheet bandwidth times the measured STREAM fraction."""
        return self.hbm_bandwidth_tb_per_s * TB_BYTES * self.hbm_efficiency

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; formats the GPU lacks fall back to bf16, then fp16 (the
        same 16-bit tensor-core rate on every GPU that lists both: a V100-style profile lists fp16
        alone), then fp32. Training in fp8 or fp4 where the GPU lists no such peak is refused
        before this is asked (``constraints.format_runs``).
        """
        for key in (dtype, "bf16", "fp16", "fp32"):
            if key in self.peak_tflops:
                return self.peak_tflops[key] * TERA  # type: ignore[index]
        raise KeyError(dtype)  # unreachable: the validator requires bf16 or fp16


MAX_LINK_LATENCY_US = 1e6
"""The longest per-step latency a link may state: one second, about a million times an NVLink hop
(about 1 us), tens of thousands of times an InfiniBand or in-network reduction step (a few to
tens of us) and a thousand times the slowest shipped tier (a localhost gloo ring, about 0.9 ms):
a bound, not a measurement, so that a mistyped latency (1e300) fails when the profile loads
instead of pricing every collective in centuries."""


class Interconnect(Frozen):
    """One tier of links, as seen by one GPU.

    ``bandwidth_gb_per_s`` is per GPU and unidirectional (NVLink4: 900 GB/s bidirectional =
    450 GB/s; one 400 Gb/s NIC per GPU = 50 GB/s), the quantity nccl-tests' bus bandwidth is
    measured against; ``bus_efficiency`` is the fraction of it that nccl-tests' busbw reaches at
    large messages. ``latency_us`` is the per-step latency (alpha) of a ring algorithm. Where the
    switch reduces in the network (NVLS, SHARP) and it has been measured, an all-reduce costs
    M / (bandwidth * in_network_efficiency) + in_network_latency instead, if that is faster.
    ``domain_size_gpus`` is how many GPUs share this fast domain (8 in a DGX, 72 in an NVL72);
    None means the tier reaches every GPU of the cluster.
    """

    name: str
    bandwidth_gb_per_s: Rate
    bus_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1)
    latency_us: float = Field(ge=0, le=MAX_LINK_LATENCY_US)
    domain_size_gpus: int | None = Field(None, gt=0, le=MAX_CLUSTER_GPUS)
    job_segment_gpus: int | None = Field(
        None,
        gt=0,
        le=MAX_CLUSTER_GPUS,
        description="GPUs of one fast domain a job larger than the domain is given (a scheduler's aligned "
        "segment, e.g. 16 trays = 64 GPUs of an NVL72 rack); None: the whole domain",
    )
    point_to_point_links: int | None = Field(
        None,
        gt=0,
        le=MAX_POINT_TO_POINT_LINKS,
        description="A switchless, fully connected domain (AMD MI300X's xGMI: 7 links to 7 peers): "
        "bandwidth_gb_per_s is this many point-to-point links together, so a collective over m GPUs of the "
        "domain drives m - 1 of them and a send one (``cost.comm.group_link``); None: a switch (NVSwitch) gives "
        "any group of the domain the full bandwidth",
    )
    in_network_reduction: Literal["none", "nvls", "sharp"] = "none"
    in_network_efficiency: float | None = Field(
        None, ge=MIN_EFFICIENCY, le=1, description="In-network all-reduce: achieved fraction of the link bandwidth"
    )
    in_network_latency_us: float | None = Field(
        None, ge=0, le=MAX_LINK_LATENCY_US, description="In-network all-reduce: fixed cost"
    )
    sources: dict[str, str]

    @model_validator(mode="after")
    def _sources(self) -> Interconnect:
        priced = (self.in_network_efficiency is not None, self.in_network_latency_us is not None)
        if any(priced) and not all(priced):
            raise ValueError("give in_network_efficiency and in_network_latency_us together")
        if all(priced) and self.in_network_reduction == "none":
            raise ValueError("in_network_efficiency needs in_network_reduction nvls or sharp")
        links, size = self.point_to_point_links, self.domain_size_gpus
        if links is not None and size is not None and links > max(size - 1, 1):
            raise ValueError(
                f"point_to_point_links {links}: a GPU of a fully connected domain of {size} links to at most "
                f"{max(size - 1, 1)} peers"
            )
        check_sources(self, self.sources, skip={"sources", "name", "in_network_reduction"})
        return self

    @property
    def in_network_bytes_per_s(self) -> float:
        """Bandwidth of an in-network all-reduce, each rank sending and receiving M once; 0 when
        the tier has none (or it is not measured)."""
        return self.bandwidth_gb_per_s * GB_BYTES * (self.in_network_efficiency or 0.0)

    @property
    def bus_bandwidth_bytes_per_s(self) -> float:
        """Achievable bus bandwidth per GPU: datasheet bandwidth times measured efficiency."""
        return self.bandwidth_gb_per_s * GB_BYTES * self.bus_efficiency

    def members_share(self, members: np.ndarray) -> np.ndarray:
        """Share of the bandwidth a collective over ``members`` GPUs of one domain drives: all of it
        through a switch; on ``point_to_point_links`` the m - 1 links to the other members (a ring
        or an all-to-all runs over every link between them: RCCL's rings on MI300X's mesh)."""
        links = self.point_to_point_links
        members = np.asarray(members, dtype=float)
        if links is None:
            return np.ones(np.shape(members))
        # one member in the domain moves nothing over it: no link to cap the group by
        return np.where(members <= 1, 1.0, np.clip((members - 1.0) / links, 1.0 / links, 1.0))

    @property
    def send_share(self) -> float:
        """Share of the bandwidth one send drives: one link of ``point_to_point_links``, else all."""
        return 1.0 / (self.point_to_point_links or 1)

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


class RunCalibration(Frozen):
    """What ``plan calibrate --from-runs`` wrote into a shipped profile: the command, the runs
    file, the rows the fit used, and each row's cross-validated error (percent, predicted vs
    published tokens/s per GPU, from a fit that did not see the row's fold) by stack, the
    error bar of every prediction on this profile."""

    command: str
    runs_file: str
    rows: list[str]
    cv_error_pct: dict[str, list[float]] = Field(default_factory=dict)


MAX_PRICE_PER_GPU_HOUR_USD = 1e6
"""The highest price per GPU-hour planned: a million dollars, tens of thousands of times any list
price (a few dollars to tens of dollars), so no real price is refused while a mistyped one fails
at once instead of overflowing a cost to infinity. A bound, not a measurement."""


MIN_PRICE_PER_GPU_HOUR_USD = 1e-6
"""The lowest price per GPU-hour planned: a millionth of a dollar, far below any price (a CPU
core-hour costs about a cent), so that a denormal 1e-320 fails at once instead of pricing every
candidate at 1e-321 dollars and ranking by rounding noise. A bound, not a measurement."""


class HardwareProfile(Frozen):
    """A node type: its GPUs, how many per node, the links inside and between nodes.

    One YAML file per profile under hardware_profiles/. ``price_per_gpu_hour_usd`` is optional.
    """

    name: str
    description: str
    gpus_per_node: int = Field(gt=0, le=MAX_CLUSTER_GPUS)
    gpus_per_host: int | None = Field(
        None,
        gt=0,
        le=MAX_CLUSTER_GPUS,
        description="GPUs one host (one operating system, one torchrun) drives where a node of the profile spans "
        "several: an NVL72 rack's compute trays hold 4; None: the node is one host",
    )
    gpu: GPU
    intra_node: Interconnect
    inter_node: Interconnect
    price_per_gpu_hour_usd: PositiveFloat | None = Field(
        None, ge=MIN_PRICE_PER_GPU_HOUR_USD, le=MAX_PRICE_PER_GPU_HOUR_USD
    )
    calibration: RunCalibration | None = None
    calibrated_like: str | None = Field(
        None,
        description="A profile whose runs fit stands for this one (same die at the same power limit, no runs of "
        "its own): its fitted GPU values and error bar apply here; the source says why",
    )
    sources: dict[str, str]

    @model_validator(mode="after")
    def _sources(self) -> HardwareProfile:
        skip = {"sources", "name", "description", "gpu", "intra_node", "inter_node", "calibration"}
        check_sources(self, self.sources, skip=skip, required={"calibrated_like"})
        domain = self.intra_node.domain_size_gpus
        if domain is not None and domain % self.gpus_per_node:
            raise ValueError(
                f"intra_node.domain_size_gpus {domain} is not a multiple of gpus_per_node {self.gpus_per_node}: the "
                "intra-node links reach every GPU of a node, so their domain holds whole nodes"
            )
        if self.gpus_per_host is not None and self.gpus_per_node % self.gpus_per_host:
            raise ValueError(
                f"gpus_per_host {self.gpus_per_host} does not divide gpus_per_node {self.gpus_per_node}: "
                "a node is whole hosts"
            )
        segment, whole = self.intra_node.job_segment_gpus, domain or self.gpus_per_node
        if segment is not None and segment > whole:
            # a segment is part of one fast domain; a larger one had been read as the domain in one place
            # and as no segments in another (a review, 2026-12-07: 80 on an NVL72 rack of 72)
            raise ValueError(
                f"intra_node.job_segment_gpus {segment} is more than the {whole} GPUs of a fast domain "
                "(domain_size_gpus, else gpus_per_node): a job's segment is part of one domain"
            )
        return self


class ClusterSpec(Frozen):
    """The cluster a plan runs on: a node profile times a node count.

    ``num_gpus`` may be below ``num_nodes * gpus_per_node`` when only part of the last node is
    used (``--gpus``). Ranks fill nodes in order, ``gpus_per_node`` at a time.
    """

    name: str
    profile: HardwareProfile
    num_nodes: PositiveInt
    num_gpus: PositiveInt

    @model_validator(mode="after")
    def _gpus_fit_nodes(self) -> ClusterSpec:
        if self.num_nodes * self.profile.gpus_per_node > MAX_CLUSTER_GPUS:
            raise ValueError(
                f"num_nodes {self.num_nodes} x {self.profile.gpus_per_node} GPUs is more than the "
                f"{MAX_CLUSTER_GPUS:,} GPUs planned at most"
            )
        capacity = self.num_nodes * self.profile.gpus_per_node
        if self.num_gpus > capacity:
            raise ValueError(
                f"num_gpus {self.num_gpus} exceeds {self.num_nodes} nodes x {self.profile.gpus_per_node} GPUs"
            )
        if self.num_gpus <= (self.num_nodes - 1) * self.profile.gpus_per_node:
            raise ValueError(f"num_gpus {self.num_gpus} leaves a node of the {self.num_nodes} empty")
        return self

    @property
    def gpu(self) -> GPU:
        return self.profile.gpu

    def with_price(self, price_per_gpu_hour_usd: float | None, option: str = "--price") -> ClusterSpec:
        """This cluster at another price per GPU-hour (``--price``; the library's argument ``price``
        names itself as ``option``); None keeps the profile's."""
        if price_per_gpu_hour_usd is None:
            return self
        price = price_per_gpu_hour_usd
        number = isinstance(price, int | float) and not isinstance(price, bool)
        if not number or not MIN_PRICE_PER_GPU_HOUR_USD <= price <= MAX_PRICE_PER_GPU_HOUR_USD:
            shown = integer_shown(price) if number and isinstance(price, int) else repr(price)
            raise PlannerError(
                f"{option} must be a finite number from {MIN_PRICE_PER_GPU_HOUR_USD:g} to "
                f"{MAX_PRICE_PER_GPU_HOUR_USD:,.0f} USD per GPU-hour, got {shown}"
            )
        profile = self.profile.model_copy(update={"price_per_gpu_hour_usd": price_per_gpu_hour_usd})
        return self.model_copy(update={"profile": profile})

    @property
    def gpus_per_node(self) -> int:
        return self.profile.gpus_per_node

    @property
    def gpus_per_host(self) -> int:
        """GPUs one host drives (one torchrun per host): the profile's ``gpus_per_host`` where its
        node spans several hosts (an NVL72 rack's 4-GPU trays), else the node's."""
        return self.profile.gpus_per_host or self.profile.gpus_per_node

    @property
    def intra_node(self) -> Interconnect:
        return self.profile.intra_node

    @property
    def inter_node(self) -> Interconnect:
        return self.profile.inter_node

    @property
    def fast_domain_gpus(self) -> int:
        """GPUs of one job reachable over the intra-node tier: one node, or an NVL72 rack. A job of
        whole domains holds each whole (2 racks = 144 GPUs: ranks 0-71 on one rack, so a group of 16
        ranks 64-79 straddles two); a job larger than one domain but not a whole number of them gets
        the profile's ``job_segment_gpus`` of each (aligned segments: Slurm block scheduling gives a
        256-GPU job 64 GPUs of each of 4 racks)."""
        intra = self.profile.intra_node
        domain = intra.domain_size_gpus or self.profile.gpus_per_node
        if intra.job_segment_gpus is not None and self.num_gpus > domain and self.num_gpus % domain != 0:
            return min(intra.job_segment_gpus, domain)
        return domain

    @property
    def price_per_gpu_hour_usd(self) -> float | None:
        return self.profile.price_per_gpu_hour_usd

    def describe(self) -> str:
        """How the name was read, e.g. 'dgx-h100x16: 16 nodes x 8 H100 SXM 80GB = 128 GPUs'; where fewer
        GPUs than the nodes hold are used, which: the profile's job segments of every node
        (``fast_domain_gpus``; 256 GPUs of four NVL72 racks are 64 of each, which the header had called
        the last node partly used, a review, 2026-12-07), else the last node's share."""
        partial = ""
        if self.num_gpus != self.num_nodes * self.gpus_per_node:
            segment = self.fast_domain_gpus
            if segment < self.gpus_per_node:  # placed in segments of each node, the last node's partly filled
                last = self.num_gpus - (self.num_nodes - 1) * segment
                partial = f" ({segment} of each node's {self.gpus_per_node}: the profile's job segments" + (
                    ")" if last == segment else f"; the last node's {last})"
                )
            else:
                last = self.num_gpus - (self.num_nodes - 1) * self.gpus_per_node
                partial = f" (the last node's {last} of {self.gpus_per_node})"
        return (
            f"{self.name}: {self.num_nodes} node{'s' if self.num_nodes > 1 else ''} x "
            f"{self.gpus_per_node} {self.gpu.name} = {self.num_gpus} GPUs{partial}"
        )

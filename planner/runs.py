"""Published training runs as planner inputs: one row of a runs file (the schema of
shared/groundtruth/modern_runs.yaml) to a model, cluster, job and mesh, from the row's own fields.

Nothing here is keyed by a run's name: a row the planner has never seen is priced the same way.
Each field is read as the file's ``field_conventions`` state (null: not stated):

  model     layers, hidden, heads, kv_heads, head_dim, ffn (dense), experts, top_k, expert_ffn,
            shared_experts, dense_layers, an MLA or sliding-window 'attention' description (a window
            on every layer, or alternating with full layers as GPT-OSS's; 'sinks' in it sets
            attention_sinks), vocab, seq_len, tied_embeddings, ffn_act; MPT's architecture from
            its arch_notes (GELU MLP, LayerNorm and biases, learned positions, tied embeddings);
            the biases and SwiGLU clamp of GPT-OSS (hf_id openai/gpt-oss-*) and Qwen3's q/k norms from
            the hf_id
  hardware  the GPU description picks a shipped profile (``GPU_PROFILES``), count the GPUs
  software  the source repository picks the stack (``STACKS``); compile, async_tp, ep_comm_overlap
            and the FSDP mixed-precision policy override its defaults where the row states them
  parallel  tp, pp, cp, ep, dp, vp (interleaved when > 1), micro_batch, grad_accum, global_batch,
            the FSDP/ZeRO description, sequence parallelism (on with TP, as Megatron-Core's
            recipes and torchtitan run it)
  knobs     precision (fp8 for any 8-bit float recipe, its scaling granularity), activation
            checkpointing, or the recipe's recompute granularity where the row's recipe_hint
            gives it

A knob the row does not state (Megatron-Bridge tables give no recompute) is left to the search,
which picks the fastest setting that fits, as a tuned recipe would. A row the planner cannot
express raises ``UnpriceableError`` with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from planner.catalog import load_cluster, load_stack, model_for_repo, read_yaml
from planner.constraints import format_message, format_runs
from planner.cost.pipeline import layers_per_chunk, smallest_chunk_layers
from planner.errors import PlannerError, SchemaError, UnpriceableError, shown, shown_value
from planner.hf_config import full_every
from planner.mesh import MeshArrays
from planner.schemas.base import GIB_BYTES, positive_figure
from planner.schemas.estimate import Estimate
from planner.schemas.hardware import ClusterSpec, HardwareProfile
from planner.schemas.job import JobSpec
from planner.schemas.model import MAX_MODEL_DIMENSION, ModelSpec
from planner.schemas.parallel import ParallelConfig
from planner.schemas.stack import Stack

T = TypeVar("T")


GPU_PROFILES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("h800",), "dgx-h800"),
    (("h100", "96gb"), "h100-96g-500w"),
    (("h100", "hbm2e"), "h100-96g-500w"),
    (("h100",), "dgx-h100"),
    (("h200",), "dgx-h200"),
    (("a100",), "dgx-a100-80g"),
    (("gb300",), "gb300-nvl72"),
    (("gb200",), "gb200-nvl72"),
    (("b300",), "dgx-b300"),
    (("b200",), "dgx-b200"),
    (("blackwell", "184 gib"), "gb200-nvl72"),
    (("mi300x",), "mi300x"),
)
"""Words of a row's ``hardware.gpu`` description (lower case, all must appear) -> shipped
profile, first match wins (a GB300 before the B300 its name contains). torchtitan's H100s are
Grand Teton 96 GB HBM2e parts at 500 W (torchtitan benchmarks/llama3_h100_202412_torchtitan.md),
not the 80 GB SXM of a DGX. A 'Blackwell' of about 184 GiB is a GB200 (185 GiB; a B200 has 179).
A GPU described as power limited without the limit has no profile: its clocks are unknown."""

STACKS: dict[str, str] = {
    "mosaicml/llm-foundry": "llm-foundry",
    "pytorch/torchtitan": "torchtitan",
    "pytorch/ao": "torchtitan",
    "nvidia-nemo/megatron-bridge": "megatron-core",
    "nvidia/megatron-lm": "megatron-core",
    "microsoft/deepspeed": "deepspeed",
    "nvidia/nemo": "megatron-core",
}
"""Source repository of a row -> stack. torchao's training benchmarks run torchtitan; the NeMo
Framework's LLM pre-training recipes (NVIDIA/NeMo 1.x and 2.0, whose GPT/Llama models are
Megatron-Core's GPTModel, and Megatron-Bridge after them) run Megatron-Core. A fork keeps its
upstream's stack: a repository not listed is looked up by its name without the owner."""

STACK_URLS: dict[str, str] = {
    "/nemo-framework/user-guide/": "megatron-core",
    "/nemo/megatron-bridge/": "megatron-core",
}
"""Documentation pages a row may cite instead of a repository -> stack (the NeMo Framework's
and Megatron-Bridge's performance summaries, on docs.nvidia.com or a mirror of it)."""

FP8_WORDS = ("fp8", "float8", "mxfp8")
FP4_WORDS = ("nvfp4", "fp4")
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class RunCase:
    """One published run as the planner sees it: what to price and the pins the row states."""

    name: str
    group: str
    published_tokens_per_s_per_gpu: float
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    pins: dict[str, Any]
    profile: str
    stack: str
    assumed: list[str] = field(default_factory=list)
    published_peak_memory_bytes: float | None = None

    def under(self, profile: HardwareProfile | None, stack: Stack | None) -> tuple[ClusterSpec, JobSpec]:
        """The case's cluster and job with ``profile`` and ``stack`` in place of the shipped ones
        (None keeps them): how the fit tries parameter values."""
        cluster = self.cluster if profile is None else self.cluster.model_copy(update={"profile": profile})
        job = self.job if stack is None else self.job.model_copy(update={"stack": stack})
        return cluster, job

    def summary(self) -> dict[str, Any]:
        """The row's configuration as priced (for the benchmark's JSON)."""
        return {
            "profile": self.profile,
            "stack": self.stack,
            "gpus": self.cluster.num_gpus,
            "dtype": self.job.dtype,
            "seq_len": self.job.seq_len,
            "global_batch": self.job.batch_size,
            "pins": dict(self.pins),
            "assumed": list(self.assumed),
        }


def load_runs(path: str | Path) -> list[dict[str, Any]]:
    """The ``runs`` list of a runs file."""
    data = read_yaml(Path(path))
    runs = data.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise PlannerError(f"{path}: field 'runs': expected a list of run mappings")
    for i, row in enumerate(runs):
        for section in ROW_SECTIONS:
            if row.get(section) is not None and not isinstance(row[section], dict):
                raise PlannerError(
                    f"{path}: runs[{i}] ({row.get('name')!r}): field '{section}': expected a mapping, "
                    f"got {type(row[section]).__name__}"
                )
    check_row_names(runs, path)
    return runs


def check_row_names(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Every row names itself and its group with non-empty text, and no two rows share a name: the
    report lists rows by name, a fit writes the names it used into the shipped profiles
    (``calibration.rows``) and cross-validation looks rows up by them (training and serving runs
    files alike)."""
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        for key in ("name", "group"):
            value = row.get(key)
            if not isinstance(value, str) or not value.strip():
                raise PlannerError(
                    f"{path}: runs[{i}]: field '{key}': expected non-empty text, got {shown_value(value)}"
                )
        name = row["name"]
        if name in seen:
            raise PlannerError(
                f"{path}: runs[{i}]: field 'name': {name!r} is also runs[{seen[name]}]'s; names are unique"
            )
        seen[name] = i


ROW_SECTIONS = ("source", "model", "hardware", "parallel", "knobs", "measured")
"""The sections of a runs row, each a mapping of its fields (modern_runs.yaml's schema)."""


def check_groups(runs: list[dict[str, Any]], groups: list[str], path: str | Path) -> None:
    """``--group`` values must name groups the file has."""
    unknown = sorted(set(groups) - {str(r.get("group")) for r in runs})
    if unknown:
        raise PlannerError(f"--group '{unknown[0]}': no row of {path} has that group")


def translate_rows(
    rows: list[dict[str, Any]], build: Callable[[dict[str, Any]], T], refusal: type[PlannerError] = PlannerError
) -> tuple[list[T], list[dict[str, str]]]:
    """``build`` of every row it can express, and the others (name, group, and the ``refusal``
    it raised as the reason): the training runs' cases here, the serving runs' plans in
    ``planner.serving.calibrate``."""
    built: list[T] = []
    unpriced: list[dict[str, str]] = []
    for row in rows:
        try:
            built.append(build(row))
        except refusal as err:
            unpriced.append({"name": str(row.get("name")), "group": str(row.get("group")), "reason": str(err)})
    return built, unpriced


def nothing_priced(path: object, unpriced: list[dict[str, str]]) -> PlannerError:
    """The error of a runs file none of whose rows can be priced: nothing to fit, no error to
    report; the first row's reason says what to fix (``plan calibrate --from-runs``,
    ``plan serve-calibrate``)."""
    first = f" (first: {shown(unpriced[0]['name'])!r}: {unpriced[0]['reason']})" if unpriced else ""
    return PlannerError(f"{path}: no row can be priced{first}")


def cases_from_runs(runs: list[dict[str, Any]]) -> tuple[list[RunCase], list[dict[str, str]]]:
    """Every row the planner can express as a case, and the others (name, group, reason)."""
    return translate_rows(runs, case_from_row)


def _text(value: Any) -> str:
    return "" if value is None else str(value).lower()


def _int(section: dict[str, Any], key: str, where: str) -> int | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnpriceableError(f"{where}.{key} is not an integer ({value!r})")
    return value


def _count(section: dict[str, Any], key: str, where: str) -> int | None:
    """A size or count of a row: None where not stated, else a positive integer (a stated 0 GPUs,
    layers or micro-batch makes the row unpriceable)."""
    value = _int(section, key, where)
    if value is not None and value < 1:
        raise UnpriceableError(f"{where}.{key} is not a positive integer ({value!r})")
    return value


def _degree(section: dict[str, Any], key: str, where: str) -> int:
    """A parallel degree a row may leave out or write as 0 for 'not used' (tables print VP 0 or EP 0
    where there is none): 1 then; a negative one makes the row unpriceable."""
    value = _int(section, key, where)
    if value is not None and value < 0:
        raise UnpriceableError(f"{where}.{key} is not a parallel degree ({value!r})")
    return value or 1


def _flag(section: dict[str, Any], key: str, where: str) -> bool | None:
    """A true/false field of a row (None: not stated); text such as "false" or "no" makes the row
    unpriceable, where ``bool()`` read it as true."""
    value = section.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise UnpriceableError(f"{where}.{key} is not true or false ({value!r})")


def profile_for(gpu: str) -> str:
    """The shipped profile of a GPU description (``GPU_PROFILES``)."""
    text = _text(gpu)
    if "power limited" in text and "not stated" in text:
        raise UnpriceableError(f"GPU '{gpu}': a power limit that is not stated leaves its clocks unknown")
    for words, profile in GPU_PROFILES:
        if all(w in text for w in words):
            return profile
    raise UnpriceableError(f"no shipped hardware profile for GPU '{gpu}'")


CONTAINER_STACKS: dict[tuple[str, str], str] = {("megatron-core", "nemo 25.09"): "megatron-core-25.09"}
"""(stack, stated container) -> the stack of that release, where one has its own profile: NeMo
25.09's Megatron-Bridge recipes ran MoE before 25.11 reworked it (HybridEP dispatch, CUDA graphs
over the router and token preprocessing; Megatron-Bridge scripts/performance/configs/qwen/
qwen3_workload_base_configs.py), and the same meshes ran at other speeds: DeepSeek-V3 on 256
GB200, 3,454 tokens/s with token drop in 25.09 and 4,018 dropless in 25.11 (docs/
performance-summary.md). A container with no profile of its own takes the stack's."""


def stack_for(row: dict[str, Any]) -> str:
    """The software stack of a row, from the repository (or documentation page) its source cites."""
    source = row.get("source") or {}
    repo = _text(source.get("repo"))
    by_name = {key.split("/")[-1]: stack for key, stack in STACKS.items()}
    if repo in STACKS or repo.split("/")[-1] in by_name:
        stack = STACKS.get(repo) or by_name[repo.split("/")[-1]]
        container = _text((row.get("knobs") or {}).get("container"))
        return CONTAINER_STACKS.get((stack, container), stack)
    url = _text(source.get("url"))
    for prefix, stack in STACK_URLS.items():
        if prefix in url:
            return stack
    raise UnpriceableError(
        f"source '{source.get('repo') or source.get('paper')}' names no known software stack "
        f"({', '.join(sorted(set(STACKS.values())))})"
    )


MODEL_KEYS = frozenset(
    {
        # the shape the planner prices
        "layers",
        "hidden",
        "heads",
        "kv_heads",
        "head_dim",
        "ffn",
        "ffn_act",
        "vocab",
        "vocab_padded",
        "tied_embeddings",
        "seq_len",
        "position_embedding",
        "attention",
        "attention_note",
        "dense_layers",
        "first_k_dense_replace",
        "dense_ffn",
        "moe_layers",
        "moe_layer_freq",
        "experts",
        "top_k",
        "expert_ffn",
        "shared_experts",
        "shared_expert_ffn",
        "mtp_depth",
        *MLA_KEYS,
        # read for the refusals and the MPT/GELU rules
        "arch_notes",
        "ffn_note",
        "architecture",
        "mamba",
        "shape_partial",
        # provenance and cross-checks, which change no count
        "name",
        "hf_id",
        "shape_note",
        "total_params",
        "active_params",
        "num_params_reported",
        "mtp_layers_in_config",
    }
)
"""Keys of a row's ``model`` section the translator knows. Any other key is refused with its
name: a key that changes the count must not be dropped silently (a stated ``ffn_act: gelu`` once
priced GPT-3 as a gated MLP, 1.5x its MLP FLOPs)."""


def activation_from(ffn_act: Any, notes: str, mpt: bool) -> dict[str, Any]:
    """ModelSpec activation fields of a row: ``ffn_act`` as stated (swiglu/silu gated; geglu
    gated GELU; gelu; squared-relu, Nemotron-4's 2-matrix MLP, HF ``relu2``), else the notes'
    GELU rule (MPT and GPT-era rows say 'GELU MLP' there), else SwiGLU."""
    text = _text(ffn_act)
    if not text:
        return {"hidden_act": "gelu" if mpt or ("gelu" in notes and "swiglu" not in notes) else "silu"}
    if "swiglu" in text or "silu" in text:
        return {"hidden_act": "silu"}
    if "geglu" in text:
        return {"hidden_act": "gelu", "gated_mlp": True}
    if "relu" in text and ("squared" in text or "relu2" in text or "^2" in text):
        return {"hidden_act": "relu2"}
    if "gelu" in text:
        return {"hidden_act": "gelu"}
    raise UnpriceableError(f"model.ffn_act '{ffn_act}': allowed swiglu, silu, geglu, gelu or squared-relu")


def position_embedding_from(stated: Any) -> str:
    """``position_embedding`` as a ModelSpec type: rope (whatever share of the head it rotates:
    no FLOP or parameter count depends on it) or learned absolute; none other is modelled."""
    text = _text(stated)
    if not text or text.startswith(("rope", "rotary")):
        return "rope"
    if "learned" in text:
        return "learned"
    raise UnpriceableError(f"model.position_embedding '{stated}': allowed rope or learned absolute")


def model_from_row(row: dict[str, Any]) -> ModelSpec:
    """The row's architecture as a ModelSpec; raises ``UnpriceableError`` for a key it does not
    know (``MODEL_KEYS``) or an architecture it does not model (state-space layers, a partial
    shape)."""
    m = row.get("model") or {}
    unknown = sorted(set(m) - MODEL_KEYS)
    if unknown:
        raise UnpriceableError(
            f"model: key(s) {', '.join(unknown)} not understood; allowed {', '.join(sorted(MODEL_KEYS))}"
        )
    architecture = " ".join(_text(m.get(k)) for k in ("architecture", "mamba", "arch_notes"))
    if m.get("mamba") or "mamba" in architecture or "state-space" in architecture or "ssm" in architecture.split():
        return hybrid_model_from_row(row)
    if m.get("shape_partial"):
        raise UnpriceableError("model.shape_partial: the row's shape is incomplete")
    notes = " ".join(_text(m.get(k)) for k in ("arch_notes", "ffn_note", "attention", "attention_note"))
    attention = " ".join(_text(m.get(k)) for k in ("attention", "attention_note")).strip()
    window = sliding_window_from(attention, m.get("attention") or m.get("attention_note"))
    layers, hidden, heads = (_count(m, k, "model") for k in ("layers", "hidden", "heads"))
    if not (layers and hidden and heads and m.get("vocab") and m.get("seq_len")):
        raise UnpriceableError("model: layers, hidden, heads, vocab and seq_len are required")
    freq = m.get("moe_layer_freq")
    if freq is not None and (isinstance(freq, bool) or freq != 1):  # true == 1 is no count
        raise UnpriceableError(f"model.moe_layer_freq {freq!r}: only 1 (every layer after the dense ones) is modelled")
    experts = _count(m, "experts", "model")
    ffn = _count(m, "ffn", "model") or _count(m, "dense_ffn", "model") or _count(m, "expert_ffn", "model")
    if ffn is None:
        raise UnpriceableError("model: no ffn, dense_ffn or expert_ffn width")
    mpt = "mpt" in notes or _text(m.get("name")).startswith("mpt")
    spec: dict[str, Any] = {
        "name": str(m.get("name") or row.get("name")),
        "source": f"runs file row {row.get('name')}",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": _count(m, "kv_heads", "model") or heads,
        "head_dim": _count(m, "head_dim", "model"),
        "intermediate_size": ffn,
        # the table as run: Megatron pads the vocabulary (make_vocab_size_divisible_by)
        "vocab_size": _count(m, "vocab_padded", "model") or _count(m, "vocab", "model"),
        "max_position_embeddings": _count(m, "seq_len", "model"),
        "tie_word_embeddings": bool(_flag(m, "tied_embeddings", "model")) or "tied" in notes,
        "position_embedding_type": position_embedding_from(m.get("position_embedding")),
        **activation_from(m.get("ffn_act"), notes, mpt),
    }
    if window is not None:
        size, alternating = window
        spec["sliding_window"] = size
        if alternating and 0 < layers <= MAX_MODEL_DIMENSION:  # else ModelSpec names the count
            # HF's order for GPT-OSS: sliding first (config.json layer_types)
            spec["layer_types"] = full_every(2, layers, "sliding_attention")
    if mpt:
        spec.update(norm_type="layernorm", attention_bias=True, mlp_bias=True, position_embedding_type="learned")
    if _text(m.get("hf_id")).startswith("qwen/qwen3"):
        spec["qk_norm"] = True
    if _text(m.get("hf_id")).startswith("openai/gpt-oss"):  # GptOssConfig: attention_bias true, expert biases,
        spec.update(attention_bias=True, mlp_bias=True, swiglu_limit=7.0)  # swiglu_limit 7.0
    if "sink" in attention:
        spec["attention_sinks"] = True
    spec.update(mla_from(m, attention))
    if experts:
        spec.update(
            num_local_experts=experts,
            num_experts_per_tok=_count(m, "top_k", "model"),
            moe_intermediate_size=_count(m, "expert_ffn", "model"),
            n_shared_experts=_int(m, "shared_experts", "model") or None,
            shared_expert_intermediate_size=_count(m, "shared_expert_ffn", "model"),
            first_k_dense_replace=_int(m, "dense_layers", "model") or _int(m, "first_k_dense_replace", "model") or None,
        )
    spec["num_nextn_predict_layers"] = _int(m, "mtp_depth", "model") or 0
    try:
        model = ModelSpec(**spec)
    except SchemaError as err:
        raise UnpriceableError(f"model: {err.detail}") from None
    moe_layers = _int(m, "moe_layers", "model")
    if moe_layers is not None and moe_layers != model.num_moe_layers:
        raise UnpriceableError(
            f"model.moe_layers {moe_layers} disagrees with layers - dense layers = {model.num_moe_layers}"
        )
    return model


HYBRID_CHECKED_KEYS = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_kv_heads",
    "head_dim": "head_dim_resolved",
    "experts": "num_experts_total",
    "top_k": "num_experts_per_tok",
    "expert_ffn": "expert_intermediate_size",
    "mtp_depth": "num_nextn_predict_layers",
}
"""Row keys a hybrid row's stated shape must agree on with the catalog model its hf_id names
(``hybrid_model_from_row``), with the ModelSpec attribute each is compared to."""


def hybrid_model_from_row(row: dict[str, Any]) -> ModelSpec:
    """A hybrid (Mamba-2) row's model: its layer pattern places the Mamba, attention and MoE blocks,
    which a row's counts ('23 Mamba-2 + 23 MoE + 6 GQA attention layers') do not, so the row is
    priced as the catalog model whose ``hf_repos`` hold its ``hf_id`` (Nemotron 3 Nano from
    Megatron-Bridge's provider), after every shape the row states (``HYBRID_CHECKED_KEYS``, the
    shared experts' width and the vocabulary) agrees with it; else it is refused with the reason."""
    m = row.get("model") or {}
    hf_id = _text(m.get("hf_id"))
    model = model_for_repo(hf_id)
    if model is None or not model.is_hybrid:  # a dense catalog model under that id has no pattern to read
        raise UnpriceableError(
            f"model '{m.get('name')}': a hybrid Mamba-2 model is priced from its layer pattern, which the row does not "
            f"give and no catalog model holds for hf_id '{m.get('hf_id')}'"
            + (f" (catalog model {model.name}, under that id, is not hybrid)" if model is not None else "")
        )
    stated = {key: _count(m, key, "model") for key in HYBRID_CHECKED_KEYS}
    stated["vocab"] = _count(m, "vocab_padded", "model") or _count(m, "vocab", "model")
    shared_ffn = _count(m, "shared_expert_ffn", "model")
    stated["shared"] = shared_ffn * (_int(m, "shared_experts", "model") or 1) if shared_ffn else None
    known = {key: getattr(model, attr) for key, attr in HYBRID_CHECKED_KEYS.items()}
    known.update(vocab=model.vocab_size, shared=model.shared_expert_width)
    wrong = [f"{key} {stated[key]} (catalog {known[key]})" for key in stated if stated[key] not in (None, known[key])]
    if wrong:
        raise UnpriceableError(f"model: the row disagrees with catalog model {model.name} on {', '.join(wrong)}")
    seq = _count(m, "seq_len", "model") or model.max_position_embeddings
    return model.model_copy(
        update={
            "name": str(m.get("name") or model.name),
            "source": f"catalog model {model.name} (hf_id {m.get('hf_id')}) for runs file row {row.get('name')}",
            "max_position_embeddings": seq,  # the job's sequence, as model_from_row reads it
        }
    )


def mla_from(m: dict[str, Any], attention: str) -> dict[str, Any]:
    """DeepSeek's multi-head latent attention, from the model's own keys (q_lora_rank, ...) or the
    ``attention`` text ('MLA (q_lora_rank 1536, kv_lora_rank 512, ...)'); {} without MLA. q_lora_rank
    may be absent (DeepSeek-V2-Lite projects queries without a low-rank step)."""
    found = {k: int(m[k]) for k in MLA_KEYS if isinstance(m.get(k), int) and not isinstance(m.get(k), bool)}
    if "mla" in attention.split() or attention.startswith("mla"):
        found.update({k: int(v) for k, v in re.findall(r"(\w+_rank|\w+_head_dim)\s+(\d+)", attention) if k in MLA_KEYS})
    elif not found:
        return {}
    missing = [k for k in MLA_KEYS[1:] if k not in found]
    if missing:
        raise UnpriceableError(f"model: MLA without {', '.join(missing)}")
    return {**found, "head_dim": None}


TOKEN_DROP_CAPACITY_FACTOR = 1.0
"""Capacity factor of a row that says it drops tokens without giving one: Megatron-Bridge's
apply_moe_token_drop(model_provider, moe_expert_capacity_factor: float = 1.0,
moe_pad_expert_input_to_capacity: bool = True), src/megatron/bridge/training/utils/moe_token_drop.py,
which its 25.09 performance scripts call for the 'tokendrop' rows."""


def moe_routing_from(knobs: dict[str, Any]) -> dict[str, float]:
    """The job's MoE routing fields from a row's knobs: token drop (``moe_token_drop`` true) at
    ``TOKEN_DROP_CAPACITY_FACTOR``; force-balanced routing (benchmarks' 'force-balanced' token
    distribution, Megatron --moe-router-force-load-balancing) at imbalance 1; else the planner's
    natural-routing default."""
    if knobs.get("moe_token_drop") is True:
        return {"moe_capacity_factor": TOKEN_DROP_CAPACITY_FACTOR}
    routing = _text(knobs.get("moe_routing")) + " " + _text(knobs.get("routing"))
    if "force-balanced" in routing or "force balanced" in routing or "force_load_balancing" in routing:
        return {"moe_load_imbalance": 1.0}
    return {}


def mtp_from(knobs: dict[str, Any]) -> dict[str, int]:
    """JobSpec fields for the row's MTP: 'w/o MTP' trains none (mtp_layers 0); any other mention
    ('w/ MTP', 'MTP depth 1 trained', or unlabelled with the published FLOPs per token of the
    'w/ MTP' row) trains the model's ``mtp_depth``, as does a row that does not say."""
    said = _text(knobs.get("mtp")).strip()
    return {"mtp_layers": 0} if said.startswith(("w/o", "without", "no mtp")) else {}


def sliding_window_from(attention: str, stated: Any) -> tuple[int, bool] | None:
    """(window, alternating with full layers) of a row's attention description, None without a
    window: 'sliding-window(128)' on every layer, or 'alternating full / sliding-window(128)'
    (GPT-OSS). Another mix of layer kinds is refused with its text."""
    if "sliding" not in attention and "window" not in attention:
        return None
    found = re.search(r"window\s*\(?\s*(\d+)", attention)
    if not found:
        raise UnpriceableError(f"attention '{stated}': a sliding window without its size")
    alternating = "alternating" in attention
    if "full" in attention and not alternating:
        raise UnpriceableError(f"attention '{stated}': a mix of full and sliding layers other than alternating")
    return int(found.group(1)), alternating


HALF_WORDS = ("bf16", "fp16", "bfloat16", "float16")
"""Words of a 16-bit precision description ('amp_bf16', 'BF16', 'fp16 mixed'), priced as bf16:
the same tensor-core rate on every profile."""

UNPRICED_FORMAT_WORDS = ("fp32", "float32", "tf32", "fp64", "int8", "int4", "fp6")
"""Words of matmul formats the planner has no rate for: a description that names one and no priced
format makes the row unpriceable, where it was priced as bf16."""


def dtype_from(precision: str) -> str:
    """The matmul format a precision description names: fp4 for NVFP4, fp8 for any fp8 variant,
    else bf16 (a 16-bit format, or a description such as 'mixed precision' that names none); one
    that names only a format without a rate here (``UNPRICED_FORMAT_WORDS``: tf32, int8) makes the
    row unpriceable."""
    if any(w in precision for w in FP4_WORDS):
        return "fp4"
    if any(w in precision for w in FP8_WORDS):
        return "fp8"
    if any(w in precision for w in UNPRICED_FORMAT_WORDS) and not any(w in precision for w in HALF_WORDS):
        raise UnpriceableError(
            f"knobs.precision '{precision}': not a format the planner prices (bf16, fp16, fp8, NVFP4)"
        )
    return "bf16"


BF16_LAYER_RANGE = re.compile(r"layers (\d+)-(\d+)[^,;]*?\bbf16")
"""A stated range of layers kept in bf16, as torchtitan's NVFP4 rows word it ('NVFP4 linears in
layers 0-26, layers 27-31 and LM head bf16')."""


def bf16_last_layers_from(precision: str, layers: int) -> int:
    """How many of the model's last layers a precision description keeps in bf16 (0 when it names
    none); a bf16 range that does not end at the last layer cannot be expressed."""
    found = BF16_LAYER_RANGE.search(precision)
    if not found:
        return 0
    first, last = int(found.group(1)), int(found.group(2))
    if last != layers - 1 or first > last:
        raise UnpriceableError(f"precision '{precision}': bf16 layers {first}-{last} are not the model's last ones")
    return last - first + 1


def fp8_scaling_from(precision: str) -> str:
    """The fp8 scaling granularity a precision description names: 'rowwise' per row; per tensor
    where it says so (per-tensor, current scaling, tensorwise), even when it also names another
    variant (Megatron-Bridge 25.09's 'primary number ... per-tensor/current-scaling FP8 vs. the
    parenthesized block-scaled variant' is the per-tensor one); MXFP8 and FP8-MX (32-element
    blocks) and DeepSeek's 1x128/128x128 tiles per block; else per tensor."""
    if "rowwise" in precision:
        return "row"
    if any(word in precision for word in ("per-tensor", "current-scaling", "current scaling", "tensorwise")):
        return "tensor"
    if "mx" in precision or "block" in precision or "tile" in precision:
        return "block"
    return "tensor"


TORCHTITAN_LAYER_AC_EVERY = 2
"""torchtitan's 'selective layer' activation checkpointing wraps every n-th transformer block,
n = selective_ac_option, '2' in its train configs (pytorch/torchtitan train_configs/*.toml at
1ea476e, April 2024: selective_ac_option = '2'; torchtitan/parallelisms/parallelize_llama.py
checkpoint_wrapper when _count % ac_freq == 0)."""


def recompute_from(knob: Any) -> str | None:
    """Activation checkpointing as stated -> recompute mode; None when not stated. torchtitan's
    'selective layer' checkpoints whole layers, every ``TORCHTITAN_LAYER_AC_EVERY``-th: full
    recompute of that share of the layers (``layer_ac_every``)."""
    if knob is True:
        return "full"
    if knob is False:
        return "none"
    text = _text(knob)
    if not text or "not stated" in text:
        return None
    if text.startswith("none"):
        return "none"
    if ("selective" in text and "layer" not in text) or "sac" in text or "per-op" in text:
        return "selective"
    if "full" in text or "layer" in text:
        return "full"
    raise UnpriceableError(f"knobs.activation_checkpointing '{knob}' is not none, selective or full")


def layer_ac_every(knob: Any) -> int | None:
    """n of an activation checkpointing that recomputes every n-th layer ('selective layer');
    None when it recomputes every layer or none."""
    text = _text(knob)
    return TORCHTITAN_LAYER_AC_EVERY if "selective" in text and "layer" in text else None


def recompute_layers_from_recipe(hint: Any) -> int | None:
    """``recompute_num_layers=N`` of a row's recipe hint when its method is block (the first N
    layers of each chunk); None otherwise: with the uniform method N is the size of the groups
    that are checkpointed together, and every layer is recomputed."""
    text = _text(hint)
    found = re.search(r"recompute_num_layers=(\d+)", text)
    return int(found.group(1)) if found and "recompute_method=block" in text else None


def recompute_from_recipe(hint: Any) -> str | None:
    """Recompute as a row's ``recipe_hint`` (the framework's recipe for the run) states it: its
    ``recompute_granularity``; None otherwise."""
    text = _text(hint)
    for mode in ("selective", "full"):
        if f"recompute_granularity={mode}" in text:
            return mode
    return None


def offload_layers_from_recipe(hint: Any) -> int | None:
    """``cpu_offloading_num_layers=N`` of a row's recipe hint (Megatron-Core's activation offload
    of the first N layers, ``ParallelConfig.offload_layers``); None where the hint states none.
    Megatron-Bridge's Llama-3 70B and 405B FP8-CS recipes on GB200/GB300 offload 10-92 layers;
    the layer count does not depend on the global batch the hints warn may differ from the
    table's, only on the micro-batch, which they state alike."""
    found = re.search(r"cpu_offloading_num_layers=(\d+)", _text(hint))
    layers = int(found.group(1)) if found else 0
    return layers or None


def recompute_modules_from(stated: Any, hint: Any) -> tuple[str, ...] | None:
    """Megatron's selective-recompute modules a row states (``knobs.recompute_modules``, a list or
    its text) or its recipe hint gives (``recompute_modules=["mla_up_proj", ...]``); None when
    neither says. A module the planner does not know is refused by name."""
    from planner.cost.recompute import MODULE_NAMES

    if isinstance(stated, (list, tuple)):
        names = [str(x) for x in stated]
    elif stated:
        names = re.findall(r"[a-z_]+", _text(stated))
    else:
        found = re.search(r"recompute_modules\s*=\s*\[([^\]]*)\]", _text(hint))
        if found is None:
            return None
        names = re.findall(r"[a-z_]+", found.group(1))
    unknown = [n for n in names if n not in MODULE_NAMES]
    if unknown or not names:
        raise UnpriceableError(
            f"recompute_modules {names}: allowed {', '.join(MODULE_NAMES)}"
            + (f" (not {', '.join(unknown)})" if unknown else "")
        )
    return tuple(dict.fromkeys(names))


ZERO_STAGES = (0, 1, 2, 3)
"""The ZeRO stages a row's ``parallel.zero_stage`` may state as a number."""


def zero_stage_from(parallel: dict[str, Any], stack: Stack) -> int:
    """The FSDP/ZeRO description as a ZeRO stage: a stated stage (0-3), else full sharding (FSDP
    FULL_SHARD, FSDP2, Megatron-FSDP) 3, SHARD_GRAD_OP 2, Megatron's distributed optimizer 1,
    plain DDP 0. A stage stated as true/false, text with a number ("3", "ZeRO-3") or another type
    makes the row unpriceable: it was ignored, and the fsdp text or the stack decided."""
    stage = parallel.get("zero_stage")
    if isinstance(stage, int) and not isinstance(stage, bool) and stage in ZERO_STAGES:
        return stage
    if stage is not None and (not isinstance(stage, str) or re.search(r"\d", stage)):
        raise UnpriceableError(
            f"parallel.zero_stage {stage!r}: allowed a stage 0, 1, 2 or 3 (a number, not quoted) or a "
            "description without one (distributed optimizer, n/a)"
        )
    fsdp = _text(parallel.get("fsdp"))
    if "shard_grad_op" in fsdp:
        return 2
    if "full_shard" in fsdp or ("fsdp" in fsdp and "no fsdp" not in fsdp):
        return 3
    if "distributed optimizer" in _text(stage) or "ddp" in fsdp:
        return 1 if "distributed optimizer" in _text(stage) else 0
    return stack.default_zero_stage


COMPILED_LOSS_SINCE = (2025, 4, 1)
"""torchtitan compiles its loss with the model from pytorch/torchtitan PR #1033 (merged 2025-04-01:
build_loss_fn compiles it when training.compile is set); before, train.py kept it eager ("TODO:
compiling loss function causes CUDA errors, turning off for now"). A row with compile on whose
stated software is dated before this ran the blocks compiled and the loss eager."""

MONTHS = {
    m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))
}


def software_dated_before(software: object, since: tuple[int, int, int]) -> bool:
    """Whether a row's ``knobs.software`` text dates its software before ``since`` (year, month,
    day): every date it states (2024-12-26, 'Apr 2024' as the month's last day, a nightly's
    dev20250811) lies before it. Text with no date (commit hashes, versions) says nothing: False."""
    text = _text(software)
    dates = [(int(y), int(m), int(d)) for y, m, d in re.findall(r"(20\d\d)-(\d\d)-(\d\d)", text)]
    dates += [(int(y), int(m), int(d)) for y, m, d in re.findall(r"dev(20\d\d)(\d\d)(\d\d)", text)]
    dates += [
        (int(y), MONTHS[m[:3]], 31) for m, y in re.findall(r"\b([a-z]{3})[a-z]* (20\d\d)\b", text) if m[:3] in MONTHS
    ]
    return bool(dates) and max(dates) < since


def reads_alternative(row: dict[str, Any]) -> bool:
    """Whether a row reads the value in parentheses of a table row that holds two variants
    (``source.variant``, Megatron-Bridge's 'FP8-CS (FP8-MX)' pairs): such a row's columns without
    parentheses belong to the other variant too, so where its stated micro-batch, accumulation
    steps and batch disagree, the micro-batch is the column to distrust. A row that reads its own
    values keeps its stated micro-batch (Megatron-Bridge 25.11's Qwen3-235B BF16 on GB300 states MBS 2,
    GA 32 and GBS 8192 at dp 64: 64 micro-batches of 2, as the preset's micro_batch_size=2 in
    scripts/performance/configs/qwen/qwen3_workload_base_configs.py runs it)."""
    return "in parentheses" in _text((row.get("source") or {}).get("variant"))


def case_from_row(row: dict[str, Any]) -> RunCase:
    """Translate one runs-file row; raises ``UnpriceableError`` with the reason where it cannot."""
    name, group = str(row.get("name")), str(row.get("group"))
    hardware, par, knobs = row.get("hardware") or {}, row.get("parallel") or {}, row.get("knobs") or {}
    measured = row.get("measured") or {}
    published = measured.get("tokens_per_s_per_gpu")
    if positive_figure(published) is None:
        raise UnpriceableError(f"measured.tokens_per_s_per_gpu is not a positive finite number ({published!r})")
    if "campaign" in _text(measured.get("tokens_per_s_per_gpu_note")):
        raise UnpriceableError("a campaign average (batch ramp, stalls, restarts), not a steady-state step time")
    precision = _text(knobs.get("precision"))
    if "mxfp4" in precision:
        raise UnpriceableError(f"precision '{knobs.get('precision')}': MXFP4 training is not modelled (fp4 is NVFP4)")
    stack_name = stack_for(row)
    stack = load_stack(stack_name)
    model = model_from_row(row)
    profile = profile_for(hardware.get("gpu", ""))
    gpus = _count(hardware, "count", "hardware")
    if not gpus:
        raise UnpriceableError("hardware.count is missing")
    cluster = load_cluster(profile, gpus=gpus)
    per_node = _count(hardware, "gpus_per_node", "hardware")
    if per_node is not None and cluster.gpus_per_node % per_node:
        # a DGX's 8, or an NVL72 rack's 4-GPU trays: a node the profile's does not tile is another system
        raise UnpriceableError(
            f"hardware.gpus_per_node {per_node}: the {profile} profile's nodes hold {cluster.gpus_per_node} GPUs, "
            "which that does not divide"
        )
    degrees = {k: _degree(par, k, "parallel") for k in ("tp", "pp", "cp", "ep")}
    dp = _count(par, "dp", "parallel")
    if dp is None or dp * degrees["tp"] * degrees["pp"] * degrees["cp"] != gpus:
        raise UnpriceableError(f"parallel: tp*pp*cp*dp does not make the {gpus} GPUs (dp {par.get('dp')!r})")
    mbs = _count(par, "micro_batch", "parallel")
    if not mbs:
        raise UnpriceableError("parallel.micro_batch is not stated")
    assumed: list[str] = []
    batch = par.get("global_batch")
    accum = _count(par, "grad_accum", "parallel") if degrees["pp"] == 1 else None
    if accum:
        if isinstance(batch, int) and not isinstance(batch, bool) and batch != mbs * accum * dp:
            assumed.append(
                f"global_batch: micro-batch {mbs} x grad_accum {accum} x dp {dp} = {mbs * accum * dp} per step, "
                f"not the stated {batch}"
            )
        batch = mbs * accum * dp  # what one step ran (Composer lets the stated batch differ)
    stated_accum = par.get("grad_accum")
    if (
        degrees["pp"] > 1
        and isinstance(stated_accum, int)
        and isinstance(batch, int)
        and stated_accum > 0
        and mbs * stated_accum * dp != batch
    ):
        if reads_alternative(row) and batch % (dp * stated_accum) == 0:
            # the batch and its accumulation steps fix the micro-batch: the row is the variant in
            # parentheses, whose table shares the MBS column with the other variant
            assumed.append(f"micro_batch: {batch} / (dp {dp} x grad_accum {stated_accum}), not the stated {mbs}")
            mbs = batch // (dp * stated_accum)
        else:
            assumed.append(
                f"grad_accum: the stated {stated_accum} does not make the batch {batch} with micro-batch {mbs} "
                f"and dp {dp}; the row's own micro-batch and batch are kept"
            )
    if not isinstance(batch, int) or isinstance(batch, bool):
        raise UnpriceableError(f"parallel.global_batch is not a number ({batch!r})")
    vp = _degree(par, "vp", "parallel")
    pins: dict[str, Any] = {
        **degrees,
        "dp": dp,
        "micro_batch_size": mbs,
        "zero_stage": zero_stage_from(par, stack),
        "sequence_parallel": degrees["tp"] > 1,
        "schedule": "interleaved-1f1b" if vp > 1 else "1f1b",
        "virtual_stages": vp,
        "overlap_grad_reduce": stack.overlap_grad_reduce,
    }
    recompute = recompute_from(knobs.get("activation_checkpointing")) or recompute_from_recipe(knobs.get("recipe_hint"))
    block_layers = recompute_layers_from_recipe(knobs.get("recipe_hint"))
    if recompute is None and block_layers:
        recompute = "full"
    # Megatron recomputes its modules under selective granularity only (full ignores them)
    modules = recompute_modules_from(knobs.get("recompute_modules"), knobs.get("recipe_hint"))
    if modules is not None and recompute in (None, "selective"):
        recompute = "selective"
    else:
        modules = None
    offload = offload_layers_from_recipe(knobs.get("recipe_hint"))
    if offload is not None and recompute in (None, "none"):
        # Megatron-Core offloads only without recompute (ParallelConfig.offload_layers)
        recompute = "none"
        pins["offload_layers"] = offload
    if recompute is None:
        assumed.append("recompute: not stated, the search's choice")
    else:
        pins["recompute"] = recompute
    every = layer_ac_every(knobs.get("activation_checkpointing"))
    per_chunk = layers_per_chunk(model.num_hidden_layers, degrees["pp"] * vp)
    if every is None and recompute == "full" and block_layers:
        pins["recompute_layers"] = min(block_layers, per_chunk)
    overrides: dict[str, Any] = {}
    # true/false, else unpriceable by name: text such as 'false' or 0 had been read as not stated
    compiled, async_tp, ep_overlap = (_flag(knobs, k, "knobs") for k in ("compile", "async_tp", "ep_comm_overlap"))
    if compiled is not None:
        overrides["compile"] = compiled
        if compiled and stack.compiles_loss and software_dated_before(knobs.get("software"), COMPILED_LOSS_SINCE):
            overrides["compile_loss"] = False
    if async_tp is not None:
        overrides["tp_comm_overlap"] = async_tp
    if ep_overlap is not None:
        overrides["ep_comm_overlap"] = ep_overlap
    if model.is_moe:
        overrides.update(moe_routing_from(knobs))
    overrides.update(mtp_from(knobs))
    if modules is not None:
        overrides["recompute_modules"] = modules
    mixed = _text(knobs.get("fsdp_mixed_precision")) + precision
    if "pure" in mixed:
        overrides["gradient_dtype"] = "bf16"  # Composer's PURE policy reduces in bf16
    elif "reduce fp32" in mixed:
        overrides["gradient_dtype"] = "fp32"
    formats = {
        "dtype": dtype_from(precision),
        "fp8_scaling": fp8_scaling_from(precision),
        "bf16_last_layers": bf16_last_layers_from(precision, model.num_hidden_layers),
    }
    try:
        job = JobSpec(
            global_batch_size=batch,
            seq_len=model.max_position_embeddings,
            **formats,
            stack=stack_name,
            **overrides,
        )
    except SchemaError as err:
        raise UnpriceableError(f"job: {err.detail}") from None
    if not format_runs(cluster, job):
        raise UnpriceableError(format_message(cluster, job))
    if every is not None:
        # every n-th layer: the count of the smallest chunk that n recomputes (``cost.pipeline.recompute_every``
        # reads n back from it), which the chunks' even share had missed on uneven splits (a review, 2026-12-07)
        smallest = int(smallest_chunk_layers(model, job, MeshArrays.from_configs([pinned_config(pins)]))[0])
        pins["recompute_layers"] = max(smallest // every, 1)
    pinned_config(pins)  # a mesh the row states but the planner cannot express fails here
    check_within_peak(float(published), model, cluster, job)
    memory = published_peak_memory_bytes(measured, cluster)
    case = RunCase(name, group, float(published), model, cluster, job, pins, profile, stack_name, assumed, memory)
    if recompute is not None:
        check_memory(case)
    return case


SLOWEST_PLAUSIBLE_MFU = 1e-3
"""A published rate below this share of the GPU's dense peak (0.1% MFU) is refused as a typo or a
figure of another unit: the slowest shipped row runs at 4.4% (Nemotron 3 Super in NVFP4 on B300,
benchmarks/data/heldout_blackwell_megatron.yaml), and a row at 1e-9 tokens/s had made a 3.5e13%
MAPE and pulled the fitted sustained fraction to 0.52. A judgement with a 40x margin."""


def check_within_peak(published: float, model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> None:
    """Refuse a published rate above what the GPU can compute: tokens/s per GPU x the model's FLOPs
    per token (``model_flops_per_token``, the full-square count, the larger; no recompute) past the GPU's dense peak
    in the job's format is more than 100% MFU, a typo or a figure of another unit (the shipped rows
    reach 64%), and one such row would pull a fit; nor one below ``SLOWEST_PLAUSIBLE_MFU`` of it.
    Raises ``UnpriceableError``."""
    from planner.cost.flops import model_flops_per_token, mtp_layers

    peak = cluster.gpu.peak_flops_per_s(job.dtype)
    ceiling = peak / model_flops_per_token(model, job.seq_len, mtp_layers(model, job))
    said = f"at its dense {job.dtype} peak ({peak / 1e12:,.0f} TFLOP/s) and {model.name}'s FLOPs per token"
    if published > ceiling:
        raise UnpriceableError(
            f"measured.tokens_per_s_per_gpu {published:,.6g} is more than one {cluster.gpu.name} can compute: "
            f"{ceiling:,.0f} {said}"
        )
    if published < SLOWEST_PLAUSIBLE_MFU * ceiling:
        raise UnpriceableError(
            f"measured.tokens_per_s_per_gpu {published:.3g} is below {SLOWEST_PLAUSIBLE_MFU:.1%} MFU on one "
            f"{cluster.gpu.name} ({SLOWEST_PLAUSIBLE_MFU * ceiling:,.3g} of the {ceiling:,.0f} {said}): a typo or "
            "another unit"
        )


PEAK_MEMORY_UNITS = {"peak_memory_gib": GIB_BYTES, "peak_memory_gb": GIB_BYTES}
"""Fields of ``measured`` that give a run's peak memory per GPU, by unit: torchtitan's tables
print the allocator's max_reserved in GiB (train.py's ``memory/max_reserved(GiB)``). The one source
of ``peak_memory_gb``, torchao's float8 training tables, heads its column 'GB' but fills it from the
same torchtitan log: pytorch/ao benchmarks/float8/training/parse_torchtitan_logs.py reads
'memory: ([\\d.]+)GiB' and prints 'Max Memory Usage: {max_memory_usage} GiB' (helper-25,
2026-12-06), so it is read in GiB; read as 1e9 bytes, the same job measured 7% lower than it
ran. A source that means 1e9 bytes needs a field of its own."""


def published_peak_memory_bytes(measured: dict[str, Any], cluster: ClusterSpec | None = None) -> float | None:
    """The row's measured peak memory per GPU in bytes (``PEAK_MEMORY_UNITS``, else a ``memory``
    text in GiB, ``MEMORY_TEXT``), None where it states none; a value of ``PEAK_MEMORY_UNITS`` that
    is not a positive finite number, or (given the ``cluster``) a peak past its GPU's memory, makes
    the row unpriceable (1e300 GiB had been read and shown as 'inf GiB measured')."""
    for key, unit in PEAK_MEMORY_UNITS.items():
        value = measured.get(key)
        if value is None:
            continue
        figure = positive_figure(value)
        if figure is None:
            raise UnpriceableError(f"measured.{key}: {value!r} is not a positive number")
        if cluster is not None and figure * unit > cluster.gpu.hbm_capacity_bytes:
            raise UnpriceableError(
                f"measured.{key} {figure:,.4g} is more than the {cluster.gpu.name}'s "
                f"{cluster.gpu.hbm_capacity_gib:g} GiB"
            )
        return figure * unit
    found = MEMORY_TEXT.match(_text(measured.get("memory")))
    return float(found.group(1)) * GIB_BYTES if found else None


MEMORY_TEXT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*gib\b")
"""A measured peak written as text, as torchtitan's NVFP4 tables give it ('110.95 GiB (60.2%)',
torchtitan/components/quantization/nvfp4.md: 'Memory' and 'Peak Reserved Memory', the allocator's
max_reserved)."""

MEMORY_MATCH_CANDIDATES = 200
"""Candidates ``resolve_config`` reads when a row states its peak memory: enough to reach the
recompute settings below the fastest meshes of a small search."""

MEMORY_MATCH_SLACK = 0.25
"""How far from a row's measured peak memory, as a factor either way, the planner's count of a mesh
may lie and the mesh still be what ran: the memory table's published rows land within -6% to +3%
of the count (torchtitan's selective op-SAC on Blackwell at +10%), so a mesh counted 25% over or
under the measured peak kept other tensors than the run did (it saved what the run recomputed, or
the reverse). A judgement call on that table, not a measurement."""


IMPOSSIBLE_MEMORY_RATIO = 2.0
"""A fully stated configuration (recompute included) that needs more than this multiple of the
GPU's usable memory by the planner's count did not run as the row states it. A judgement call,
not a measurement: the memory model counts what backward keeps tensor by tensor (cost/memory.py,
Korthikanti et al. 2022), and no plausible error of that count doubles it. Of modern_runs.yaml
it refuses only torchtitan's Llama-4 Scout rows (local batch 10 of 8192 tokens without
activation checkpointing: 3.9x a GB200's memory; their own note says the PyTorch blog of the
same campaign ran local batch 1 with full AC)."""


def check_memory(case: RunCase) -> None:
    """Refuse a row whose stated mesh, micro-batch and recompute cannot fit the GPU: its
    published throughput belongs to some other configuration."""
    from planner.pricing import estimate_mesh

    est = estimate_mesh(case.model, case.cluster, case.job, pinned_config(case.pins))
    ratio = est.memory_per_gpu_bytes / est.memory_usable_bytes
    if ratio > IMPOSSIBLE_MEMORY_RATIO:
        raise UnpriceableError(
            f"the stated configuration needs {est.memory_per_gpu_bytes / 2**30:.0f} GiB per GPU, "
            f"{ratio:.1f}x the {est.memory_usable_bytes / 2**30:.0f} GiB usable: it cannot be what ran"
        )


def price_case(
    case: RunCase,
    profile: HardwareProfile | None = None,
    stack: Stack | None = None,
    config: ParallelConfig | None = None,
) -> tuple[float, Estimate]:
    """Predicted tokens/s per GPU of a case, with the estimate behind it; ``profile`` and
    ``stack`` replace the shipped ones (the fit tries values this way), ``config`` a mesh already
    chosen (else the stated pins, and the search for knobs the row leaves open)."""
    from planner.pricing import estimate_mesh

    cluster, job = case.under(profile, stack)
    if config is None:
        config = resolve_config(case, cluster, job)
    est = estimate_mesh(case.model, cluster, job, config)
    return est.tokens_per_s_per_gpu, est


def resolve_config(case: RunCase, cluster: ClusterSpec | None = None, job: JobSpec | None = None) -> ParallelConfig:
    """The mesh a case runs: its pins, with the search filling what the row leaves open (the
    fastest that fits; the fastest of all when none fits) under the row's own job: recompute
    modules the row does not state stay the stack's default. Where the row states its peak memory
    but not its recompute, the fastest mesh the planner counts within ``MEMORY_MATCH_SLACK`` of
    that peak either way, the GPU taken to hold what the run held (``with_room``): a run that
    measured 79 GiB did not keep the 160 GiB of activations a mesh without recompute would, and
    one that measured 180 GiB kept more than full recompute's 97 (torchtitan's MXFP8 Llama-3-8B,
    whose selective recompute the planner counts at 197 GiB, over the GPU's 185). The fastest that
    fits where no candidate of ``MEMORY_MATCH_CANDIDATES`` is that near."""
    from planner.search import search

    cluster, job = cluster or case.cluster, job or case.job
    config = pinned_config(case.pins)
    if "recompute" in case.pins:
        return config
    measured = case.published_peak_memory_bytes
    high = (measured or 0.0) * (1.0 + MEMORY_MATCH_SLACK)
    roomy, top = (cluster, 1) if measured is None else (with_room(cluster, high), MEMORY_MATCH_CANDIDATES)
    try:
        ranked = search(case.model, roomy, job, case.pins, top=top, try_module_sets=False).candidates
    except PlannerError:
        return config
    if measured is not None:
        near = [c for c in ranked if measured / (1.0 + MEMORY_MATCH_SLACK) <= c.memory_per_gpu_bytes <= high]
        fits = [c for c in ranked if c.memory_per_gpu_bytes <= cluster.gpu.hbm_capacity_bytes]
        ranked = near or fits or ranked
    return ranked[0].config.parallel


def with_room(cluster: ClusterSpec, need_bytes: float) -> ClusterSpec:
    """``cluster`` with each GPU's memory raised to ``need_bytes`` where it holds less: the room a
    run's measured peak shows it had, whatever the planner's count of a mesh says it needs."""
    gpu = cluster.gpu
    if need_bytes <= gpu.hbm_capacity_bytes:
        return cluster
    roomy = gpu.model_copy(update={"hbm_capacity_gib": need_bytes / GIB_BYTES})
    return cluster.model_copy(update={"profile": cluster.profile.model_copy(update={"gpu": roomy})})


def pinned_config(pins: dict[str, Any]) -> ParallelConfig:
    """The mesh a row's pins state, with full recompute where the row states none (the fallback
    when nothing the search tries fits)."""
    try:
        return ParallelConfig(**{"recompute": "full", **pins})
    except SchemaError as err:
        raise UnpriceableError(f"parallel: {err.detail}") from None

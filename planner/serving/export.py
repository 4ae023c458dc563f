"""Launch commands for the top serving candidate (``plan serve --export vllm|sglang|trtllm``).

Every flag was checked against the engine's own code at the release named (a reading of the
argument definitions; the engines do not import on a CPU-only machine without their GPU stacks,
so the test suite checks the spelling, not the parser):
  vLLM 0.33.0 ``vllm serve``: vllm/engine/arg_utils.py EngineArgs fields tensor_parallel_size,
    pipeline_parallel_size, data_parallel_size, enable_expert_parallel, max_num_seqs,
    max_num_batched_tokens, gpu_memory_utilization, kv_cache_dtype (vllm/config/cache.py
    CacheDType includes "fp8"), kv_transfer_config (P/D with the NIXL connector).
  SGLang 0.5.23 ``python -m sglang.launch_server``: sglang/srt/arg_groups/fields (parallel.py
    tp_size, pp_size, ep_size, attn_dp_size: "the number of data-parallel attention groups inside
    the TP group", the current spelling of the deprecated ``--dp-size N --enable-dp-attention``,
    which parallel.py marks for removal after 2026-12-31; model.py kv_cache_dtype "fp8_e4m3";
    choices.py QUANTIZATION_CHOICES "fp8"), max_running_requests, chunked_prefill_size,
    mem_fraction_static, disaggregation_mode prefill|decode.
  TensorRT-LLM ``trtllm-serve`` (tensorrt_llm/commands/serve.py, NVIDIA/TensorRT-LLM main,
    2026): --tp_size, --pp_size, --ep_size (aliases of --tensor_parallel_size,
    --pipeline_parallel_size, --moe_expert_parallel_size), --max_batch_size, --max_num_tokens,
    --kv_cache_free_gpu_memory_fraction (alias of --free_gpu_memory_fraction), and
    --extra_llm_api_options (alias of --config) for a YAML of LLM-API fields
    (enable_attention_dp, kv_cache_config.dtype).
  A hybrid Mamba-2 model's SSM state format, as priced: vLLM ``--mamba-ssm-cache-dtype``
    (vllm/config/cache.py CacheConfig.mamba_ssm_cache_dtype, MambaDType 'auto', 'float32',
    'float16', 'bfloat16'), TensorRT-LLM ``kv_cache_config.mamba_ssm_cache_dtype``
    (tensorrt_llm/llmapi/llm_args.py KvCacheConfig, PR #6574); SGLang's flag was not read from its
    code, so its export says it in a comment.
The model is named by its Hugging Face repository where the catalog's source gives one. One
command per replica kind; replicas go behind a router.
"""

from __future__ import annotations

import math
import re

from planner.errors import PlannerError
from planner.schemas.model import TORCH_DTYPE_NAMES
from planner.serving.engine import load_engine
from planner.serving.schemas import ServeCandidate, ServeRanking

EXPORTS = ("vllm", "sglang", "trtllm")

TORCH_NAMES = {name: torch for torch, name in TORCH_DTYPE_NAMES.items()}
"""The SSM state formats as vLLM's --mamba-ssm-cache-dtype and TensorRT-LLM's
KvCacheConfig.mamba_ssm_cache_dtype spell them (torch names)."""


def _pool(
    engine: str,
    model: str,
    tp: int,
    pp: int,
    ep: int,
    adp: bool,
    batch: int,
    req: object,
    role: str,
    ssm_dtype: str | None = None,
) -> str:
    e = load_engine(engine)
    weights, kv = req.weights_dtype, req.kv_dtype  # type: ignore[attr-defined]
    notes: list[str] = []  # comment lines after the command: a comment inside a continued line ends it
    if engine == "vllm":
        args = [f"vllm serve {model}"]
        if adp:
            args += ["--tensor-parallel-size 1", f"--data-parallel-size {tp}", "--enable-expert-parallel"]
        else:
            args.append(f"--tensor-parallel-size {tp}")
            if ep > 1:
                args.append("--enable-expert-parallel")
        args += [f"--pipeline-parallel-size {pp}", f"--max-num-seqs {batch}"]
        args += [
            f"--max-num-batched-tokens {e.max_num_batched_tokens}",
            f"--gpu-memory-utilization {e.gpu_memory_fraction}",
        ]
        if kv == "fp8":
            args.append("--kv-cache-dtype fp8")
        if ssm_dtype:
            # the vLLM recipe for Nemotron 3 Nano (vllm-project/recipes NVIDIA/Nemotron-3-Nano-30B-A3B.md
            # @c227b4e8) launches it with --trust-remote-code
            args += [f"--mamba-ssm-cache-dtype {TORCH_NAMES[ssm_dtype]}", "--trust-remote-code"]
        if weights in ("fp8", "fp4"):
            notes.append(f"weights {weights}: serve a pre-quantised checkpoint (ModelOpt/compressed-tensors)")
        if role != "both":
            args.append("""--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'""")
            notes.append(f"{role} pool")
    elif engine == "sglang":
        args = [f"python -m sglang.launch_server --model-path {model}", f"--tp-size {tp}", f"--pp-size {pp}"]
        if adp:
            args.append(f"--attn-dp-size {tp}")
        if ep > 1:
            args.append(f"--ep-size {ep}")
        args += [f"--max-running-requests {batch}", f"--chunked-prefill-size {e.max_num_batched_tokens}"]
        args.append(f"--mem-fraction-static {e.gpu_memory_fraction}")
        if kv == "fp8":
            args.append("--kv-cache-dtype fp8_e4m3")
        if weights == "fp8":
            args.append("--quantization fp8")
        if role != "both":
            args.append(f"--disaggregation-mode {role}")
        if ssm_dtype:
            notes.append(f"Mamba-2 SSM state priced in {ssm_dtype}: set SGLang's SSM state format to match")
    elif engine == "trtllm":
        extra = []
        if adp:
            extra.append("enable_attention_dp: true")
        cache = ["dtype: fp8"] if kv == "fp8" else []
        if ssm_dtype:
            cache.append(f"mamba_ssm_cache_dtype: {TORCH_NAMES[ssm_dtype]}")
        if cache:
            extra.append("kv_cache_config: {" + ", ".join(cache) + "}")
        args = [f"trtllm-serve {model}", f"--tp_size {tp}", f"--pp_size {pp}"]
        if ep > 1:
            args.append(f"--ep_size {ep}")
        args += [f"--max_batch_size {batch}", f"--max_num_tokens {e.max_num_batched_tokens}"]
        args.append(f"--kv_cache_free_gpu_memory_fraction {e.gpu_memory_fraction}")
        if extra:
            args.append("--extra_llm_api_options extra.yaml")
            notes.append("extra.yaml: " + "; ".join(extra))
        if role != "both":
            notes.append(f"{role} pool: run under trtllm-serve disaggregated (context/generation servers)")
    else:
        raise PlannerError(f"export: unknown engine '{engine}'; allowed: {', '.join(EXPORTS)}")
    return " \\\n    ".join(args) + "".join(f"\n# {note}" for note in notes)


HF_REPO = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")
"""A Hugging Face repository in a catalog model's ``source`` (models/*.yaml cite the config.json
they were read from)."""


def checkpoint_name(model_name: str) -> str:
    """The repository an engine loads for a catalog model (its source's Hugging Face repository, else
    the first of its ``hf_repos``), else the name as given (a local path or repository the user
    named)."""
    from planner.catalog import load_model

    try:
        model = load_model(model_name)
    except PlannerError:
        return model_name
    found = HF_REPO.search(model.source or "")
    if found:
        return found.group(1)
    return model.hf_repos[0] if model.hf_repos else model_name


def export_commands(ranking: ServeRanking, engine: str) -> str:
    """Launch commands for the ranking's top candidate on ``engine``."""
    if engine not in EXPORTS:
        raise PlannerError(f"export: unknown engine '{engine}'; allowed: {', '.join(EXPORTS)}")
    if not ranking.candidates:
        raise PlannerError(f"export: nothing to export: {ranking.reason}")
    c: ServeCandidate = ranking.candidates[0]
    cfg = c.config
    tp, pp, ep, adp = int(cfg["tp"]), int(cfg["pp"]), int(cfg["ep"]), bool(cfg["attention_dp"])  # type: ignore[arg-type]
    batch = max(1, math.ceil(c.batch_per_replica))
    split = cfg.get("prefill_decode_split")
    model = checkpoint_name(ranking.model)
    lines = [
        f"# {model} on {ranking.cluster}: top candidate, {c.output_tokens_per_s_per_gpu:,.0f} output tokens/s per GPU"
    ]
    if isinstance(split, dict):
        per = split["prefill_gpus"] // split["prefill_replicas"]
        lines.append(f"# prefill pool: {split['prefill_replicas']} replica(s) of {per} GPUs")
        lines.append(
            _pool(
                engine,
                model,
                split["prefill_tp"],
                split["prefill_pp"],
                split["prefill_ep"],
                bool(split["prefill_attention_dp"]),
                batch,
                ranking.request,
                "prefill",
                ranking.mamba_ssm_dtype,
            )
        )
        lines.append(f"# decode pool: {split['decode_replicas']} replica(s) of {cfg['gpus_per_replica']} GPUs")
        lines.append(_pool(engine, model, tp, pp, ep, adp, batch, ranking.request, "decode", ranking.mamba_ssm_dtype))
    else:
        lines.append(f"# {cfg['replicas']} replica(s) of {cfg['gpus_per_replica']} GPUs behind a load balancer")
        lines.append(_pool(engine, model, tp, pp, ep, adp, batch, ranking.request, "both", ranking.mamba_ssm_dtype))
    return "\n".join(lines) + "\n"

"""Launch commands for the top serving candidate (``plan serve --export vllm|sglang|trtllm|trtllm-tensorrt``).

Every flag was checked against the engine's own code at the release named (a reading of the
argument definitions; the engines do not import on a CPU-only machine without their GPU stacks,
so the test suite checks the spelling, not the parser):
  vLLM 0.33.0 ``vllm serve``: vllm/engine/arg_utils.py EngineArgs fields tensor_parallel_size,
    pipeline_parallel_size, data_parallel_size, enable_expert_parallel, max_num_seqs, max_model_len,
    max_num_batched_tokens, gpu_memory_utilization, quantization ("fp8"), kv_cache_dtype
    (vllm/config/cache.py CacheDType includes "fp8"), kv_transfer_config (P/D with the NIXL
    connector).
  SGLang 0.5.23 ``python -m sglang.launch_server``: sglang/srt/arg_groups/fields (parallel.py
    tp_size, pp_size, ep_size, attn_dp_size: "the number of data-parallel attention groups inside
    the TP group", the current spelling of the deprecated ``--dp-size N --enable-dp-attention``,
    which parallel.py marks for removal after 2026-12-31; model.py kv_cache_dtype "fp8_e4m3";
    choices.py QUANTIZATION_CHOICES "fp8"), max_running_requests, context_length,
    chunked_prefill_size, mem_fraction_static, disaggregation_mode prefill|decode.
  TensorRT-LLM ``trtllm-serve`` (tensorrt_llm/commands/serve.py, NVIDIA/TensorRT-LLM main,
    2026): --tp_size, --pp_size, --ep_size (aliases of --tensor_parallel_size,
    --pipeline_parallel_size, --moe_expert_parallel_size), --max_batch_size, --max_seq_len, --max_num_tokens,
    --kv_cache_free_gpu_memory_fraction (alias of --free_gpu_memory_fraction), and
    --extra_llm_api_options (alias of --config) for a YAML of LLM-API fields
    (enable_attention_dp, kv_cache_config.dtype); --backend tensorrt for the TensorRT-engine
    runtime (launch_server: 'tensorrt' or 'trt' runs tensorrt_llm._tensorrt_engine.LLM, which
    builds the engine with BuildConfig's max_batch_size / max_num_tokens / max_seq_len).
  A hybrid Mamba-2 model's SSM state format, as priced: vLLM ``--mamba-ssm-cache-dtype``
    (vllm/config/cache.py CacheConfig.mamba_ssm_cache_dtype, MambaDType 'auto', 'float32',
    'float16', 'bfloat16'), TensorRT-LLM ``kv_cache_config.mamba_ssm_cache_dtype``
    (tensorrt_llm/llmapi/llm_args.py KvCacheConfig, PR #6574), SGLang ``--mamba-ssm-dtype``
    (python/sglang/srt/server_args.py ServerArgs.mamba_ssm_dtype, choices float32, bfloat16,
    float16; unset, the model config's).
The model is named by its Hugging Face repository where the catalog's source gives one. One
command per replica kind; replicas go behind a router.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from planner.errors import PlannerError
from planner.figures import rate
from planner.schemas.model import TORCH_DTYPE_NAMES
from planner.serving.engine import ENGINES, load_engine
from planner.serving.schemas import ServeCandidate, ServeRanking, ServeRequest

EXPORTS = ENGINES
"""Every engine profile has launch commands (TensorRT-LLM's TensorRT-engine runtime as trtllm-serve
``--backend tensorrt``, which builds the engine from the checkpoint at start)."""

TORCH_NAMES = {name: torch for torch, name in TORCH_DTYPE_NAMES.items()}
"""The SSM state formats as vLLM's --mamba-ssm-cache-dtype and TensorRT-LLM's
KvCacheConfig.mamba_ssm_cache_dtype spell them (torch names)."""


def _quantisation(engine: str, weights: str, checkpoint: str | None, model: str) -> tuple[list[str], list[str]]:
    """(flags, notes) that make ``engine`` serve ``weights`` from a checkpoint published in
    ``checkpoint`` (None: 16-bit). vLLM and SGLang quantise 16-bit weights to fp8 at load
    (``--quantization fp8``: vLLM's Fp8Config without a serialized fp8 checkpoint, per-tensor
    dynamic scales; SGLang's QUANTIZATION_CHOICES "fp8" likewise) and read a quantised checkpoint's
    own format from its config; fp4 needs an fp4 (ModelOpt NVFP4, MXFP4) checkpoint, as every
    TensorRT-LLM format does (its LLM API loads the checkpoint's quantisation, ModelOpt's hf_ptq.py
    --qformat fp8 / nvfp4 makes one)."""
    if weights == (checkpoint or "bf16"):
        return [], []
    if weights == "bf16":
        return [], [f"weights bf16: the published checkpoint is {checkpoint}; serve a 16-bit copy of it"]
    if weights == "fp8" and engine in ("vllm", "sglang"):
        return ["--quantization fp8"], []
    qformat, suffix = ("fp8", "-FP8") if weights == "fp8" else ("nvfp4", "-NVFP4")
    return [], [
        f"{quantised_placeholder(weights)}: a pre-quantised {weights} checkpoint of {model} (ModelOpt hf_ptq.py "
        f"--qformat {qformat}, or a published {suffix} repository), not {model} itself ({checkpoint or 'bf16'}), "
        "which would load at its own size"
    ]


def quantised_placeholder(weights: str) -> str:
    """What a command names where it needs a pre-quantised checkpoint the catalog does not list (the
    user fills it in, as HEAD_IP): a review (2026-12-07) had pasted an fp4 plan's command, which
    named the bf16 repository, and served 141 GB of bf16 weights with 20 GiB of KV cache where 135
    GiB were planned."""
    return f"{weights.upper()}_CHECKPOINT"


def _pool(
    engine: str,
    model: str,
    tp: int,
    pp: int,
    ep: int,
    adp: bool,
    batch: int,
    req: ServeRequest,
    role: str,
    ssm_dtype: str | None = None,
    checkpoint: str | None = None,
    token_budget: int | None = None,
) -> str:
    """One replica kind's launch command. ``batch`` is the replica's sequences: vLLM (one engine per
    data-parallel rank, each with its own scheduler) and TensorRT-LLM (max_batch_size per rank under
    attention DP) take it per attention-DP rank, SGLang whole (it divides max_running_requests by
    the DP size). TensorRT-LLM's max_batch_size is also per pipeline micro-batch: its executor
    admits pp times it (``PyTorchModelEngine.get_max_num_sequences``: ``num_batches =
    self.mapping.pp_size; return num_batches * self.batch_size``, PyExecutor's
    max_num_active_requests; the TensorRT-engine runtime's the same), so a replica of pp > 1
    exports ceil(batch / pp), which admits the batch priced (a review, 2026-12-07: 70B at TP4 x PP2
    priced at 48 sequences for a 30 ms TPOT exported --max_batch_size 48, which admits 96). Every
    command caps a request at the asked input + output tokens (vLLM --max-model-len, SGLang
    --context-length, TensorRT-LLM --max_seq_len), the length the KV room was sized for: the
    engines' default is the model's full context, which may not fit. The token budget per iteration
    is the one priced (``token_budget``: the engine's default on the plan's GPU), else the engine's."""
    e = load_engine(engine)
    budget = token_budget or e.max_num_batched_tokens
    weights, kv = str(req.weights_dtype), req.kv_dtype
    per_rank = math.ceil(batch / tp) if adp else batch
    length = req.input_len + req.output_len
    quant, notes = _quantisation(engine, weights, checkpoint, model)  # notes: comment lines after the command
    if notes and notes[0].startswith(quantised_placeholder(weights)):
        model = quantised_placeholder(weights)
    if engine == "vllm":
        args = [f"vllm serve {model}"]
        if adp:
            args += ["--tensor-parallel-size 1", f"--data-parallel-size {tp}", "--enable-expert-parallel"]
        else:
            args.append(f"--tensor-parallel-size {tp}")
            if ep > 1:
                args.append("--enable-expert-parallel")
        args += [f"--pipeline-parallel-size {pp}", f"--max-num-seqs {per_rank}", f"--max-model-len {length}"]
        args += [
            f"--max-num-batched-tokens {budget}",
            f"--gpu-memory-utilization {float(e.memory_fraction(tp)):g}",
        ]
        args += quant
        if kv == "fp8":
            args.append("--kv-cache-dtype fp8")
        if ssm_dtype:
            # the vLLM recipe for Nemotron 3 Nano (vllm-project/recipes NVIDIA/Nemotron-3-Nano-30B-A3B.md
            # @c227b4e8) launches it with --trust-remote-code
            args += [f"--mamba-ssm-cache-dtype {TORCH_NAMES[ssm_dtype]}", "--trust-remote-code"]
        if role != "both":
            args.append("""--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'""")
            notes.append(f"{role} pool")
    elif engine == "sglang":
        args = [f"python -m sglang.launch_server --model-path {model}", f"--tp-size {tp}", f"--pp-size {pp}"]
        if adp:
            args.append(f"--attn-dp-size {tp}")
            notes.append(f"--attn-dp-size: SGLang 0.5.23 or later; before, --dp-size {tp} --enable-dp-attention")
        if ep > 1:
            args.append(f"--ep-size {ep}")
        args += [f"--max-running-requests {batch}", f"--context-length {length}"]
        args += [f"--chunked-prefill-size {budget}", f"--mem-fraction-static {float(e.memory_fraction(tp)):g}"]
        args += quant
        if kv == "fp8":
            args.append("--kv-cache-dtype fp8_e4m3")
        if ssm_dtype:
            args.append(f"--mamba-ssm-dtype {TORCH_NAMES[ssm_dtype]}")
        if role != "both":
            args.append(f"--disaggregation-mode {role}")
    elif engine in ("trtllm", "trtllm-tensorrt"):
        extra = []
        if adp:
            extra.append("enable_attention_dp: true")
        if req.input_len > budget and not e.chunked_prefill:  # priced in budget-sized pieces (search.prefill_chunk)
            extra.append("enable_chunked_prefill: true")
        cache = ["dtype: fp8"] if kv == "fp8" else []
        if ssm_dtype:
            cache.append(f"mamba_ssm_cache_dtype: {TORCH_NAMES[ssm_dtype]}")
        if cache:
            extra.append("kv_cache_config: {" + ", ".join(cache) + "}")
        if role != "both":  # the KV cache moves from the context to the generation servers
            extra.append("cache_transceiver_config: {backend: UCX}")
            if role == "prefill":  # TensorRT-LLM's disaggregated-serving guide runs context servers without it
                extra.append("disable_overlap_scheduler: true")
        args = [f"trtllm-serve {model}", f"--tp_size {tp}", f"--pp_size {pp}"]
        if engine == "trtllm-tensorrt":
            args.insert(1, "--backend tensorrt")
        if ep > 1:
            args.append(f"--ep_size {ep}")
        args += [f"--max_batch_size {math.ceil(per_rank / pp)}", f"--max_seq_len {length}"]
        args += [f"--max_num_tokens {budget}"]
        args.append(f"--kv_cache_free_gpu_memory_fraction {float(e.memory_fraction(tp)):g}")
        if extra:
            name = "extra.yaml" if role == "both" else f"extra-{role}.yaml"
            args.append(f"--extra_llm_api_options {name}")
            notes.append(f"{name}: " + "; ".join(extra))
        if adp and role == "both":
            # TensorRT-LLM's tech blog 10, 'ADP Balance Strategy' (2025-08): unbalanced in-flight batching ran
            # 25,664 TPS against a SOL of 39,552; with attention_dp_config enable_balance 34,140 against 37,912
            notes.append(
                "the plan prices the attention-DP ranks in step, each rank's prompts in the same iterations; "
                "TensorRT-LLM runs them apart unless attention_dp_config: {enable_balance: true} (off by default), "
                "and a rank's prompt then stalls every rank's decode (its ADP balance blog: 35% of throughput), "
                "while with it prompts wait up to batching_wait_iters / timeout_iters iterations for each other, a "
                "TTFT the plan leaves out"
            )
    else:
        raise PlannerError(f"export: unknown engine '{engine}'; allowed: {', '.join(EXPORTS)}")
    return " \\\n    ".join(args) + "".join(f"\n# {note}" for note in notes)


HEAD = "HEAD_IP"
"""Where a multi-host replica's commands name its first host's address (the user fills it in)."""


def across_hosts(engine: str, command: str, gpus: int, per_host: int | None, tp: int, pp: int, adp: bool) -> str:
    """``command`` (one replica's, from ``_pool``, its notes as comment lines after it) as launched
    on a replica of ``gpus`` GPUs over hosts of ``per_host``: the engines start one process group
    per replica, whose other hosts must join it. vLLM: attention DP over hosts as its data-parallel
    deployment guide runs it (the first host with --data-parallel-size-local and
    --data-parallel-address, the others --headless from their --data-parallel-start-rank;
    vllm/engine/arg_utils.py), TP/PP over hosts on a Ray cluster (--distributed-executor-backend
    ray, with pipelined attention-DP ranks --data-parallel-backend ray too; ``ray start`` on each
    host, the command on the head); SGLang: the same command on every
    host with --nnodes, --node-rank and --dist-init-addr (server_args.py); TensorRT-LLM: one MPI
    job over the hosts' GPUs through trtllm-llmapi-launch (its multi-node trtllm-serve launcher).
    A replica within one host (or of a cluster that states no host size): ``command`` unchanged."""
    if per_host is None or gpus <= per_host:
        return command
    hosts = math.ceil(gpus / per_host)
    cmd, _, notes = command.partition("\n# ")
    tail = f"\n# {notes}" if notes else ""
    more = " \\\n    "  # the next flag on its own line, as _pool writes them
    head = f"# the replica spans {hosts} hosts of {per_host} GPUs"
    address = f"--data-parallel-address {HEAD} --data-parallel-rpc-port 13345"
    if engine == "vllm" and adp and pp == 1:
        first = f"{cmd}{more}--data-parallel-size-local {per_host}{more}{address}"
        rank = f"--data-parallel-start-rank $(({per_host} * HOST_RANK))"
        rest = f"{cmd}{more}--data-parallel-size-local {per_host}{more}{rank} --headless{more}{address}"
        return (
            f"{head}: {tp} data-parallel ranks, {per_host} a host\n# on the first host:\n{first}\n"
            + (
                "# on the other host, HOST_RANK = 1:"
                if hosts == 2
                else f"# on each other host, HOST_RANK = 1 .. {hosts - 1}:"
            )
            + f"\n{rest}{tail}"
        )
    if engine == "vllm":  # data-parallel ranks of several stages too: Ray places the ranks as well
        ray = "--distributed-executor-backend ray" + (" --data-parallel-backend ray" if adp else "")
        return (
            f"{head}: start a Ray cluster over them (on the head host: ray start --head --port 6379; on the others: "
            f"ray start --address {HEAD}:6379), then on the head host:\n{cmd}{more}{ray}{tail}"
        )
    if engine == "sglang":
        return (
            f"{head}: run on each, HOST_RANK = 0 .. {hosts - 1}:\n{cmd}{more}--nnodes {hosts} --node-rank HOST_RANK "
            f"--dist-init-addr {HEAD}:5000{tail}"
        )
    return (
        f"{head}: one MPI job over their {gpus} GPUs (srun under Slurm likewise)\n"
        f"mpirun -n {gpus} --host HOSTS trtllm-llmapi-launch {cmd}{tail}"
    )


BASE_PORT = 8000
"""The port of a host's first replica (vLLM's, SGLang's 30000 aside, each engine's --port)."""

FRONT_PORT = 8080
"""The port a disaggregated plan's front end serves on (``front_end``), apart from the servers'."""


@dataclass(frozen=True)
class Pool:
    """One pool of a disaggregated plan as launched: its role ('prefill' or 'decode'), one server's
    command (``_pool``, its notes as comment lines after it), GPUs a server, servers, whether it
    runs attention data-parallel (a vLLM data-parallel server's RPC port), and its tp and pp (how
    ``across_hosts`` starts a server wider than a host)."""

    role: str
    command: str
    gpus: int
    replicas: int
    attention_dp: bool
    tp: int
    pp: int


def place_servers(sizes: list[int], per_host: int, num_gpus: int) -> list[tuple[int, int]] | None:
    """(host, first GPU) of each server of ``sizes`` GPUs on ``num_gpus`` GPUs in hosts of
    ``per_host`` (the last host partly used where they do not divide), the largest first: a server
    of a host or less on the first host with room (so servers of powers of two sit on aligned GPUs),
    a wider one on the first run of whole hosts left empty (its first host given, GPU 0); None where
    they do not fit or a wide one is not whole hosts."""
    hosts = math.ceil(num_gpus / per_host)
    # the next free GPU of each host; the GPUs a partly used last host lacks count as taken
    free = [0] * (hosts - 1) + [per_host * hosts - num_gpus]
    placed: list[tuple[int, int]] = [(-1, -1)] * len(sizes)
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        span, rest = divmod(sizes[k], per_host)
        if span and rest:
            return None
        span = max(span, 1)
        room = sizes[k] if span == 1 else per_host
        host = next(
            (h for h in range(hosts - span + 1) if all(free[h + i] + room <= per_host for i in range(span))), None
        )
        if host is None:
            return None
        placed[k] = (host, free[host] if host < hosts - 1 else free[host] - (per_host * hosts - num_gpus))
        for i in range(span):
            free[host + i] += room
    return placed


OwnPort = tuple[str, int, int]
"""A port a server needs of its own on a host: (its flag, or its environment variable's name,
upper case), the first server's value, the step between a host's servers."""


def _own_ports(engine: str, pool: Pool) -> list[OwnPort]:
    """The ports beside --port that each server of ``pool`` needs of its own on a host: vLLM's NIXL
    side channel (``VLLM_NIXL_SIDE_CHANNEL_PORT``, 5600 by default, its handshake listener; a
    prefill and a decode server on one host both at the default fail with 'Address already in use':
    vLLM's examples start them 100 apart, 5600 and 5700, which leaves room for a server's data-parallel
    ranks, each its own offset) and a data-parallel server's engines' RPC port
    (``--data-parallel-rpc-port``, as ``side_by_side``); SGLang's prefill servers' KV bootstrap port
    (``--disaggregation-bootstrap-port``, 8998 by default, server_args.py), which its router pairs with
    each prefill URL."""
    if engine == "vllm":
        nixl: list[OwnPort] = [("VLLM_NIXL_SIDE_CHANNEL_PORT", 5600, 100)]
        return nixl + ([("--data-parallel-rpc-port", 13345, 1)] if pool.attention_dp else [])
    if engine == "sglang" and pool.role == "prefill":
        return [("--disaggregation-bootstrap-port", 8998, 1)]
    return []


def placed_pools(engine: str, pools: tuple[Pool, Pool], per_host: int | None, num_gpus: int) -> str | None:
    """A disaggregated plan's servers placed on the cluster's hosts (``place_servers``) and started
    there, with what joins them (``front_end`` over their addresses): one shell function a pool that
    starts a server on the GPUs (CUDA_VISIBLE_DEVICES) and ports given, then each host's servers, each
    on GPUs and ports of its own (``_own_ports``); HOST_h stands for host h's address. A server wider
    than a host has its hosts to itself and is started as ``across_hosts`` starts a replica, its first
    host the head (an NVL72 rack's trays hold 4 GPUs, so most of its servers span trays). A review
    (2026-12-07) had found the pools printed as one command each, every copy of a pool on a host on
    GPU 0 and port 8000 (colocated replicas got their loop, ``side_by_side``, the same day). None
    where the cluster states no host size or the servers do not fit its hosts (``place_servers``)."""
    if per_host is None:
        return None
    hosts = math.ceil(num_gpus / per_host)
    where = place_servers([p.gpus for p in pools for _ in range(p.replicas)], per_host, num_gpus)
    if where is None:
        return None
    head = f"# the servers on {hosts} host(s) of {per_host} GPUs (HOST_h: host h's address)"
    lines = [f"{head}, each on GPUs and ports of its own"]
    for pool in pools:
        if pool.gpus > per_host:
            continue  # started whole, below
        cmd, kept = _command_notes(pool)
        own = _own_ports(engine, pool)
        named = [f"${i} its {name}" for i, (name, _, _) in enumerate(own, start=3)]
        env = "".join(f" {name}=${i}" for i, (name, _, _) in enumerate(own, start=3) if name.isupper())
        flags = "".join(f" {name} ${i}" for i, (name, _, _) in enumerate(own, start=3) if not name.isupper())
        args = ", ".join(["$1 its GPUs (CUDA_VISIBLE_DEVICES)", "$2 its port", *named])
        body = cmd.replace("\n", "\n  ") + f" \\\n      --host 0.0.0.0 --port $2{flags}"
        lines.append(f"# {pool.role} pool: {pool.replicas} server(s) of {pool.gpus} GPUs")
        lines.append(f"{pool.role}_server() {{  # {args}\n  CUDA_VISIBLE_DEVICES=$1{env} {body}\n}}")
        lines.extend(f"# {n}" for n in kept)
    starts: list[list[str]] = [[] for _ in range(hosts)]
    urls: dict[str, list[str]] = {"prefill": [], "decode": []}
    bootstraps: list[int] = []
    on_host = [0] * hosts
    servers = iter(where)
    wide: list[str] = []
    for pool in pools:
        for k in range(pool.replicas):
            host, first = next(servers)
            if pool.gpus > per_host:
                wide.append(_wide_server(engine, pool, k, host, per_host))
                urls[pool.role].append(f"HOST_{host}:{BASE_PORT}")
                if engine == "sglang" and pool.role == "prefill":
                    bootstraps.append(_own_ports(engine, pool)[0][1])
                continue
            n = on_host[host]
            on_host[host] += 1
            ports = [base + step * n for _, base, step in _own_ports(engine, pool)]
            if engine == "sglang" and pool.role == "prefill":
                bootstraps.append(ports[0])
            gpus = ",".join(str(g) for g in range(first, first + pool.gpus))
            starts[host].append(" ".join([f"{pool.role}_server", gpus, str(BASE_PORT + n), *map(str, ports), "&"]))
            urls[pool.role].append(f"HOST_{host}:{BASE_PORT + n}")
    # vLLM's NIXL handshake listens on VLLM_NIXL_SIDE_CHANNEL_HOST, localhost unless set (vllm/envs.py),
    # which a server on another host cannot reach
    side = engine == "vllm" and (sum(1 for started in starts if started) > 1 or bool(wide))
    host = 0
    while host < hosts:  # runs of hosts that start the same servers, written once
        last = host
        while last + 1 < hosts and starts[last + 1] == starts[host]:
            last += 1
        if starts[host]:
            one = last == host
            on = f"HOST_{host}" if one else f"each of HOST_{host} .. HOST_{last}"
            address = f"HOST_{host}" if one else "<its own address>"
            export = [f"export VLLM_NIXL_SIDE_CHANNEL_HOST={address}"] if side else []
            lines.append("\n".join([f"# on {on}:", *export, *starts[host], "wait"]))
        host = last + 1
    lines.extend(wide)
    lines.append(front_end(engine, pools[0].replicas, pools[1].replicas, urls["prefill"], urls["decode"], bootstraps))
    return "\n".join(lines)


def _command_notes(pool: Pool) -> tuple[str, list[str]]:
    """``pool``'s server command and its notes (``_pool`` writes them as '# ' lines after it), less
    the pool's own name ('prefill pool'), which ``placed_pools`` heads the pool's lines with."""
    cmd, _, notes = pool.command.partition("\n# ")
    return cmd, [n for n in notes.split("\n# ") if n and n != f"{pool.role} pool"]


def _wide_server(engine: str, pool: Pool, k: int, host: int, per_host: int) -> str:
    """Server ``k`` of ``pool``, wider than a host, on hosts ``host`` .. as ``across_hosts`` starts a
    replica over hosts, its first host the head (HEAD_IP) and its hosts named (MPI's HOSTS, as
    host:slots): on hosts of its own, so its other ports are the engine's defaults and --port the
    first server's (``BASE_PORT``); vLLM's NIXL side channel must listen on each host's own address
    (VLLM_NIXL_SIDE_CHANNEL_HOST, localhost unless set), set where each host's processes start
    (before ``ray start`` under Ray)."""
    span = pool.gpus // per_host
    names = [f"HOST_{host + i}" for i in range(span)]
    cmd, kept = _command_notes(pool)
    command = f"{cmd} \\\n    --host 0.0.0.0 --port {BASE_PORT}" + "".join(f"\n# {n}" for n in kept)
    text = across_hosts(engine, command, pool.gpus, per_host, pool.tp, pool.pp, pool.attention_dp)
    slots = ",".join(f"{name}:{per_host}" for name in names)  # MPI's host:slots, the host's GPUs
    text = text.replace(HEAD, names[0]).replace("--host HOSTS", f"--host {slots}")
    first = f"# {pool.role} server {k + 1} on {names[0]} .. {names[-1]} (head {names[0]})"
    if engine == "vllm":
        first += "; on each of its hosts first: export VLLM_NIXL_SIDE_CHANNEL_HOST=<that host's address>"
    return f"{first}\n{text}"


def front_end(
    engine: str,
    prefill: int,
    decode: int,
    prefill_urls: list[str] | None = None,
    decode_urls: list[str] | None = None,
    bootstrap_ports: list[int] | None = None,
) -> str:
    """What sends each request of a disaggregated plan to a prefill replica and then a decode replica,
    over the ``prefill`` and ``decode`` replicas' addresses (placeholders the user fills in, as
    HEAD_IP): TensorRT-LLM's ``trtllm-serve disaggregated`` over a YAML of its context and
    generation servers (its disaggregated-serving guide: hostname, port, backend, context_servers and
    generation_servers with num_instances and urls); SGLang's router (the sglang-router package:
    ``python -m sglang_router.launch_router --pd-disaggregation``, each --prefill URL with its
    bootstrap port, 8998 by default, each --decode URL); vLLM's NIXL P/D takes a proxy that sends a
    request to a prefill server with max_tokens 1 and then to a decode server (its
    examples/online_serving/disaggregated_serving), not one command. A review (2026-12-07): the
    pools' commands had been printed without what joins them."""
    # each server on GPUs of its own (CUDA_VISIBLE_DEVICES) and a port of its own (--host 0.0.0.0 --port):
    # PREFILL_k and DECODE_k stand for their host:port (the pools may share a host), unless placed
    # (``placed_pools``: the addresses of the servers it started)
    p_urls = prefill_urls or [f"PREFILL_{i}" for i in range(1, prefill + 1)]
    d_urls = decode_urls or [f"DECODE_{i}" for i in range(1, decode + 1)]
    boots = bootstrap_ports or [8998 + i for i in range(prefill)]
    where = (
        "the servers above"
        if prefill_urls
        else "each server started on GPUs of its own (CUDA_VISIBLE_DEVICES) with --host 0.0.0.0 --port of its own; "
        "PREFILL_k and DECODE_k stand for their host:port"
    )
    if engine in ("trtllm", "trtllm-tensorrt"):
        listed = "\n".join(
            [
                "hostname: 0.0.0.0",
                f"port: {FRONT_PORT}",
                "backend: pytorch",
                "context_servers:",
                f"  num_instances: {prefill}",
                "  urls: [" + ", ".join(f'"{u}"' for u in p_urls) + "]",
                "generation_servers:",
                f"  num_instances: {decode}",
                "  urls: [" + ", ".join(f'"{u}"' for u in d_urls) + "]",
            ]
        )
        return (
            f"# the front end, serving port {FRONT_PORT} on any host that reaches the servers ({where}):\n"
            f"cat > disagg.yaml <<'EOF'\n{listed}\nEOF\ntrtllm-serve disaggregated -c disagg.yaml"
        )
    if engine == "sglang":
        flags = [f"--prefill http://{u} {b}" for u, b in zip(p_urls, boots, strict=True)]
        flags += [f"--decode http://{u}" for u in d_urls]
        return (
            f"# the router (pip install sglang-router), serving port {FRONT_PORT} ({where}"
            + ("" if prefill_urls else "; prefill server k with --disaggregation-bootstrap-port 8997 + k")
            + "):\n"
            + " \\\n    ".join(["python -m sglang_router.launch_router --pd-disaggregation", *flags])
            + f" \\\n    --host 0.0.0.0 --port {FRONT_PORT}"
        )
    # vLLM: a data-parallel server's engines also talk over an RPC port, one per server on a host
    proxy = (
        f"# the front end: a proxy that sends each request to one of the {prefill} prefill server(s) with max_tokens "
        f"1, then to one of the {decode} decode server(s) (vLLM's examples/online_serving/disaggregated_serving)"
    )
    if prefill_urls:
        return f"{proxy}: prefill servers {', '.join(p_urls)}; decode servers {', '.join(d_urls)}"
    return f"{proxy}; {where}, and a --data-parallel-rpc-port of its own where it runs --data-parallel-size"


def side_by_side(engine: str, command: str, gpus: int, per_host: int | None, replicas: int, adp: bool) -> str:
    """``command`` (one replica's, its notes as comment lines after it) as the replicas that share a
    host run it: each on its own GPUs (CUDA_VISIBLE_DEVICES) and port (--port, which vLLM's ``vllm
    serve``, SGLang's launch_server and ``trtllm-serve`` all take; a vLLM data-parallel deployment's
    --data-parallel-rpc-port too), in one shell loop a host, a load balancer over the ports. A review
    (2026-12-07): 8 replicas of TP1 on one DGX H100 had printed one command, whose copies all took
    GPU 0 and port 8000. Unchanged: one replica, a replica of a whole host or more
    (``across_hosts``), or a cluster that states no host size."""
    if per_host is None or replicas <= 1 or gpus >= per_host:
        return command
    cmd, _, notes = command.partition("\n# ")
    tail = f"\n# {notes}" if notes else ""
    if engine == "vllm" and adp:
        cmd += " \\\n    --data-parallel-rpc-port $((13345 + i))"
    here = min(replicas, per_host // gpus)
    devices = "$i" if gpus == 1 else f"$(seq -s, $((i * {gpus})) $((i * {gpus} + {gpus - 1})))"
    hosts = math.ceil(replicas / here)
    where = "on the host" if hosts == 1 else f"on each of {hosts} hosts"
    return (
        f"# {here} replicas {where}, each on its own {gpus} GPU(s) and port {BASE_PORT}.. (a load balancer over "
        f"them):\nfor i in $(seq 0 {here - 1}); do\n  CUDA_VISIBLE_DEVICES={devices} {cmd} \\\n    --port "
        f"$(({BASE_PORT} + i)) &\ndone\nwait{tail}"
    )


HF_REPO = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")
"""A Hugging Face repository in a catalog model's ``source`` (models/*.yaml cite the config.json
they were read from)."""


def checkpoint_name(model_name: str, given: str | None = None) -> str:
    """The repository an engine loads: where the model was given as a Hugging Face config.json or
    its folder (``given``), that folder (the engines load a local checkpoint folder); for a
    catalog model its source's Hugging Face repository, else the first of its ``hf_repos``, and
    where ``given`` names an instruct alias (llama3-70b-instruct) the first of those that is an
    instruct repository (a review: the alias had exported the base weights); else the name as given."""
    from pathlib import Path

    from planner.catalog import load_model

    if given is not None and (
        Path(given).name == "config.json" or (Path(given).suffix == ".json" and Path(given).is_file())
    ):
        # a config file of another name: its folder too, the checkpoint the engine loads beside it (its
        # stem, 'cfg_llama', is neither a path nor a Hub repository: a review, 2026-12-07)
        return str(Path(given).parent)
    if given is not None and (Path(given) / "config.json").is_file():
        return given
    try:
        model = load_model(model_name)
    except PlannerError:
        return model_name
    repos = [*HF_REPO.findall(model.source or ""), *model.hf_repos]
    if given is not None and "instruct" in given.lower():  # an instruct alias serves the instruct weights
        tuned = [r for r in repos if "instruct" in r.lower()]
        if tuned:
            return tuned[0]
    return repos[0] if repos else model_name


def _checkpoint_format(model_name: str, given: str | None) -> str | None:
    """The published checkpoint's weight format (``ModelSpec.checkpoint_weights_dtype``)."""
    from planner.catalog import load_model

    try:
        return load_model(given or model_name).checkpoint_weights_dtype
    except PlannerError:
        return None


def export_commands(ranking: ServeRanking, engine: str, model_given: str | None = None) -> str:
    """Launch commands for the ranking's top candidate on ``engine`` (the engine it was priced
    for); ``model_given`` is the --model text, a catalog name or a file path."""
    if engine not in EXPORTS:
        raise PlannerError(f"export: unknown engine '{engine}'; allowed: {', '.join(EXPORTS)}")
    if engine != ranking.engine:
        raise PlannerError(
            f"export: the plan was priced for {ranking.engine} (memory fraction, batch cap, fitted rates); "
            f"rank it with --engine {engine} to export {engine}"
        )
    if not ranking.candidates:
        raise PlannerError(f"export: nothing to export: {ranking.reason}")
    c: ServeCandidate = ranking.candidates[0]
    cfg = c.config
    tp, pp, ep, adp = int(cfg["tp"]), int(cfg["pp"]), int(cfg["ep"]), bool(cfg["attention_dp"])  # type: ignore[arg-type]
    # a replayed batch is a time average (48.00000000000021 for 48 in flight): its float noise is not
    # a sequence more. At a request rate the replay admitted up to the KV room (or the engine's cap),
    # whose peak a time average of it understates (8B at 2 req/s: a mean of 5.1, where a cap of 6 had
    # queued the Poisson bursts, TTFT 22 ms -> 2.1 s, a review of 2026-12-07); at a concurrency up to
    # the replica's share of the requests in flight. The room is the candidate's as priced: its KV cache's,
    # capped by the engine's batch limit for the plan's GPU (``EngineProfile.for_gpu``) on each
    # attention-DP rank that schedules apart; capping it again by the engine's large-GPU limit for the
    # whole replica had exported DeepSeek-V3 on vLLM at TP8 with attention DP at 4 req/s with 128
    # sequences a rank where the replay had admitted 200 (its KV room). A disaggregated plan's decode
    # pool at a rate likewise (``disagg.replayed_split`` admits up to its room: a cap at its time-mean
    # batch, 27 where 70B's decode replicas at 8 req/s admit 600, had queued its bursts too); its
    # prefill pool runs the budget's prompts a round, as its replay admits them (``prefill_batch``)
    split = cfg.get("prefill_decode_split")
    replicas = int(cfg["replicas"])  # type: ignore[call-overload]
    room = max(1, c.max_concurrency // max(replicas, 1))
    batch = max(1, math.ceil(round(c.batch_per_replica, 6)))
    if ranking.request.request_rate is not None:
        batch = room
    elif ranking.request.concurrency is not None and not split:
        batch = min(room, max(batch, math.ceil(ranking.request.concurrency / max(replicas, 1))))
    model = checkpoint_name(ranking.model, model_given)
    ckpt = _checkpoint_format(ranking.model, model_given)
    ssm = ranking.mamba_ssm_dtype
    budget = ranking.token_budget
    lines = [
        f"# {model} on {ranking.cluster}: top candidate, {rate(c.output_tokens_per_s_per_gpu)} output tokens/s per GPU"
    ]
    gpus = int(cfg["gpus_per_replica"])  # type: ignore[call-overload]
    if isinstance(split, dict):
        per = split["prefill_gpus"] // split["prefill_replicas"]
        prefill = (split["prefill_tp"], split["prefill_pp"], split["prefill_ep"], bool(split["prefill_attention_dp"]))
        # the prompts a prefill replica was priced holding (disagg.prefill_prompts x pp)
        p_command = _pool(
            engine, model, *prefill, split["prefill_batch"], ranking.request, "prefill", ssm, ckpt, budget
        )
        d_command = _pool(engine, model, tp, pp, ep, adp, batch, ranking.request, "decode", ssm, ckpt, budget)
        pools = (
            Pool("prefill", p_command, per, int(split["prefill_replicas"]), prefill[3], *prefill[:2]),
            Pool("decode", d_command, gpus, int(split["decode_replicas"]), adp, tp, pp),
        )
        placed = placed_pools(engine, pools, ranking.gpus_per_host, ranking.num_gpus)
        if placed is not None:
            return "\n".join([*lines, placed]) + "\n"
        lines.append(f"# prefill pool: {split['prefill_replicas']} replica(s) of {per} GPUs")
        lines.append(across_hosts(engine, p_command, per, ranking.gpus_per_host, *prefill[:2], prefill[3]))
        lines.append(f"# decode pool: {split['decode_replicas']} replica(s) of {gpus} GPUs")
        lines.append(across_hosts(engine, d_command, gpus, ranking.gpus_per_host, tp, pp, adp))
        lines.append(front_end(engine, int(split["prefill_replicas"]), int(split["decode_replicas"])))
        return "\n".join(lines) + "\n"
    lines.append(f"# {cfg['replicas']} replica(s) of {cfg['gpus_per_replica']} GPUs behind a load balancer")
    command = _pool(engine, model, tp, pp, ep, adp, batch, ranking.request, "both", ssm, ckpt, budget)
    command = side_by_side(engine, command, gpus, ranking.gpus_per_host, replicas, adp)
    lines.append(across_hosts(engine, command, gpus, ranking.gpus_per_host, tp, pp, adp))
    return "\n".join(lines) + "\n"

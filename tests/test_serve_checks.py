"""plan serve: what the engines would refuse at launch (context length, GPU architecture, layouts
an engine cannot run, attention-DP pins), the checkpoint's own weight format, and launch commands
that start the plan as priced (per-rank batch caps, request length, quantisation)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from planner.catalog import load_cluster, load_model
from planner.errors import PlannerError
from planner.hf_config import checkpoint_weights_dtype
from planner.serving.engine import FittedParameters, load_engine
from planner.serving.export import export_commands
from planner.serving.layout import Layouts
from planner.serving.runs import checkpoint_format
from planner.serving.schemas import ServeRequest
from planner.serving.search import enumerate_layouts, serve_search
from planner.serving.step import Setting
from tests.conftest import assert_one_line_error


def _flag(text: str, flag: str) -> int:
    found = re.search(rf"{re.escape(flag)} (\d+)", text)
    assert found, (flag, text)
    return int(found.group(1))


def test_attention_dp_exports_the_batch_per_rank_where_the_engine_caps_it_per_rank() -> None:
    # gpt-oss-120b on 8 H100 wins with attention DP over 8 ranks; vLLM runs one engine per DP rank
    # and TensorRT-LLM's max_batch_size is per rank, SGLang divides its cap by the DP size itself
    cluster = load_cluster("dgx-h100")
    model = load_model("gpt-oss-120b")
    for engine in ("vllm", "trtllm", "sglang"):
        ranking = serve_search(model, cluster, ServeRequest(engine=engine, tpot_s=0.02, attention_dp=True))
        top = ranking.candidates[0]
        assert top.config["attention_dp"] and top.config["tp"] == 8
        batch = math.ceil(round(top.batch_per_replica, 6))  # as the export rounds the replay's mean
        text = export_commands(ranking, engine)
        flag = {"vllm": "--max-num-seqs", "trtllm": "--max_batch_size", "sglang": "--max-running-requests"}[engine]
        assert _flag(text, flag) == (batch if engine == "sglang" else math.ceil(batch / 8)), text


def test_exports_cap_a_request_at_the_length_the_kv_room_was_sized_for() -> None:
    cluster = load_cluster("dgx-h100")
    req = {"input_len": 3000, "output_len": 1000}
    for engine, flag in (("vllm", "--max-model-len"), ("sglang", "--context-length"), ("trtllm", "--max_seq_len")):
        ranking = serve_search(load_model("llama3-8b"), cluster, ServeRequest(engine=engine, **req))
        assert _flag(export_commands(ranking, engine), flag) == 4000


def test_vllm_starts_with_smaller_batch_limits_on_an_a100_and_below_70_gib() -> None:
    # vLLM's get_batch_defaults: 1,024 sequences and 8,192 tokens an iteration on a GPU of >= 70 GiB
    # whose name has no 'a100', else 256 and 2,048; the plan is priced and exported with them
    vllm = load_engine("vllm")
    for cluster, seqs, tokens in (("dgx-h100", 1024, 8192), ("dgx-a100-80g", 256, 2048), ("l40s", 256, 2048)):
        e = vllm.for_gpu(load_cluster(cluster).gpu)
        assert (e.max_batch_size, e.max_num_batched_tokens) == (seqs, tokens), cluster
    # the other engines' defaults do not depend on the GPU
    assert load_engine("trtllm").for_gpu(load_cluster("dgx-a100-80g").gpu) == load_engine("trtllm")
    ranking = serve_search(load_model("llama3-8b"), load_cluster("dgx-a100-80g"), ServeRequest(engine="vllm"))
    assert ranking.token_budget == 2048 and all(c.batch_per_replica <= 256 for c in ranking.candidates)
    assert _flag(export_commands(ranking, "vllm"), "--max-num-batched-tokens") == 2048
    assert _flag(export_commands(ranking, "vllm"), "--max-num-seqs") <= 256


def test_vllm_runs_expert_parallelism_over_every_rank_or_none() -> None:
    model, cluster = load_model("deepseek-v3"), load_cluster("dgx-h200")
    vllm = enumerate_layouts(model, cluster, load_engine("vllm"), ServeRequest(engine="vllm"))
    assert {(int(t), int(e)) for t, e in zip(vllm.tp, vllm.ep, strict=True) if e > 1} == {(2, 2), (4, 4), (8, 8)}
    sglang = enumerate_layouts(model, cluster, load_engine("sglang"), ServeRequest(engine="sglang"))
    assert (8, 4) in {(int(t), int(e)) for t, e in zip(sglang.tp, sglang.ep, strict=True)}


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--tp", "8", "--ep", "4"), ("ep:", "vllm", "every rank", "ep = tp (8)")),
        (("--tp", "8", "--ep", "4", "--attention-dp", "--engine", "sglang"), ("attention_dp:", "ep = tp", "ep 4")),
        (("--tp", "8", "--ep", "1", "--attention-dp", "--engine", "sglang"), ("attention_dp:", "ep = tp", "ep 1")),
        (("--tp", "8", "--ep", "3", "--engine", "sglang"), ("ep: 3 must divide",)),
    ],
)
def test_layout_pins_an_engine_cannot_run_name_the_rule(cli, args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    assert_one_line_error(cli("serve", "--model", "deepseek-v3", "--cluster", "dgx-h200", *args), *fragments)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--model", "llama2-7b", "--cluster", "dgx-h100", "--input-len", "8000"), ("8512 tokens", "context of 4096")),
        (("--model", "llama3-70b", "--cluster", "mi300x", "--engine", "trtllm"), ("engine: trtllm runs on", "cdna3")),
        (("--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "1", "--disaggregate"), ("disaggregate:",)),
        # TensorRT-LLM's support matrix: no FP8 on Ampere (vLLM runs FP8 weights there weight-only)
        (
            ("--model", "llama3-8b", "--cluster", "dgx-a100-80g", "--engine", "trtllm", "--weights-dtype", "fp8"),
            ("--weights-dtype fp8: trtllm runs fp8 on ada, hopper, blackwell", "A100 SXM4 80GB is ampere"),
        ),
        (
            ("--model", "llama3-8b", "--cluster", "dgx-a100-80g", "--engine", "trtllm-tensorrt", "--kv-dtype", "fp8"),
            ("--kv-dtype fp8: trtllm-tensorrt runs fp8", "use --kv-dtype bf16, or vllm or sglang"),
        ),
        (("--model", "llama3-8b", "--cluster", "dgx-h100", "--engine", "vllm", "--export", "trtllm"), ("--export",)),
        (("--model", "llama3-8b", "--cluster", "dgx-h100", "--export", "tgi"), ("--export: unknown engine 'tgi'",)),
        # spelled as --engine is: VLLM had failed as field 'engine', '' had been read as unset (vllm)
        (("--model", "llama3-8b", "--cluster", "dgx-h100", "--export", "VLLM"), ("--export: unknown engine 'VLLM'",)),
        (("--model", "llama3-8b", "--cluster", "dgx-h100", "--engine", ""), ("field 'engine'", "'vllm'")),
    ],
)
def test_requests_the_engines_would_refuse_are_one_line_errors(cli, args, fragments) -> None:
    assert_one_line_error(cli("serve", *args), *fragments)


def test_formats_an_engine_runs_weight_only_are_priced_with_a_warning(cli) -> None:
    # vLLM runs FP8 weights on an A100 weight-only (no FP8 tensor cores): priced so, and said
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-a100-80g", "--weights-dtype", "fp8")
    assert r.code == 0 and "no FP8 tensor cores, priced as weight-only at the BF16 rate" in r.out


@pytest.mark.parametrize(
    ("model", "what"),
    [
        ("deepseek-v3", "multi-head latent attention"),
        ("gpt-oss-120b", "learned attention sinks"),
        ("nemotron-3-nano", "Mamba-2 layers among its attention layers"),
        ("llama4-scout", "chunked local attention"),
    ],
)
def test_the_tensorrt_engine_runtime_refuses_models_it_builds_no_engine_for(cli, model: str, what: str) -> None:
    # TensorRT-LLM's TensorRT-engine model list has none of these; its PyTorch backend runs them
    r = cli("serve", "--model", model, "--cluster", "dgx-h200", "--engine", "trtllm-tensorrt")
    assert_one_line_error(r, "engine: trtllm-tensorrt builds no model with", what, "use vllm, sglang or trtllm")
    mixtral = ("serve", "--model", "mixtral-8x7b", "--cluster", "dgx-h200", "--engine", "trtllm-tensorrt")
    assert cli(*mixtral).code == 0
    # and attention DP is a PyTorch-backend option
    assert_one_line_error(cli(*mixtral, "--attention-dp"), "attention_dp:", "trtllm-tensorrt runs no attention DP")


def test_every_model_feature_an_engine_may_lack_is_read_from_the_model() -> None:
    from typing import get_args

    from planner.serving.engine import ModelFeature
    from planner.serving.search import MODEL_FEATURES

    assert set(MODEL_FEATURES) == set(get_args(ModelFeature))
    has = {f: [name for name in ("deepseek-v3", "gpt-oss-120b", "nemotron-3-nano", "llama4-scout", "llama3-70b")
               if MODEL_FEATURES[f][1](load_model(name))] for f in MODEL_FEATURES}  # fmt: skip
    assert has == {
        "mla": ["deepseek-v3"],
        "attention_sinks": ["gpt-oss-120b"],
        "hybrid_mamba": ["nemotron-3-nano"],
        "chunked_attention": ["llama4-scout"],
    }


def test_export_alone_prices_for_its_engine(cli) -> None:
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100", "--export", "trtllm")
    assert r.code == 0, r.err
    assert "trtllm-serve" in r.out


def test_weights_default_to_the_checkpoints_format() -> None:
    cluster = load_cluster("dgx-h200")
    formats = {name: serve_search(load_model(name), cluster, ServeRequest()).request.weights_dtype
               for name in ("deepseek-v3", "gpt-oss-120b", "llama3-70b")}  # fmt: skip
    assert formats == {"deepseek-v3": "fp8", "gpt-oss-120b": "fp4", "llama3-70b": "bf16"}
    asked = serve_search(load_model("deepseek-v3"), cluster, ServeRequest(weights_dtype="fp4", tp=8))
    assert asked.request.weights_dtype == "fp4"
    # a runs file's row whose weights are 'the model default' reads the same catalog field
    assert (checkpoint_format("openai/gpt-oss-20b"), checkpoint_format("deepseek-ai/DeepSeek-R1")) == ("fp4", "fp8")
    assert checkpoint_format("meta-llama/Llama-3.1-8B-Instruct") is None


@pytest.mark.parametrize(
    ("quantization", "expected"),
    [
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
        ({"quant_method": "mxfp4"}, "fp4"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
        ({"quant_method": "awq", "bits": 4}, None),
        (None, None),
    ],
)
def test_hf_quantization_config_names_the_checkpoints_format(quantization: object, expected: str | None) -> None:
    assert checkpoint_weights_dtype(quantization) == expected


def test_a_checkpoint_that_leaves_its_attention_16bit_is_served_so() -> None:
    """openai/gpt-oss's config.json quantizes the experts alone (modules_to_not_convert lists every
    layer's self_attn): served in its MXFP4, the attention projections are read and multiplied in
    bf16, where they had been priced at fp4 (a quarter of the bytes, four times the FP4 rate on
    Blackwell); served in another format, the re-quantized checkpoint quantizes them too."""
    from planner.hf_config import keeps_attention_16bit, model_from_hf_config
    from planner.serving.memory import attention_weights_dtype, block_weight_bytes_per_gpu, weight_params
    from planner.serving.runs import model_from_row
    from planner.serving.step import gemm_pairs

    gpt_oss = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
    assert keeps_attention_16bit(gpt_oss)
    assert not keeps_attention_16bit({"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]})
    assert not keeps_attention_16bit({"quant_algo": "NVFP4", "exclude_modules": ["model.layers.0.self_attn"]})
    assert keeps_attention_16bit({"quant_algo": "NVFP4", "ignore": ["lm_head", "*.self_attn.*"]})
    for one_part in (  # one layer's, one projection's, an encoder's or a linear attention's: not every layer's
        "model.layers.0.self_attn*",
        "model.layers.*.self_attn.o_proj",
        "vision_model.model.layers.*.self_attn",
        "model.visual.blocks.*.attn",
        "model.layers.*.linear_attn",
        "re:model.layers.[0-3].self_attn.*",
    ):
        assert not keeps_attention_16bit({"quant_method": "mxfp4", "modules_to_not_convert": [one_part]}), one_part
    with pytest.raises(PlannerError, match="checkpoint_16bit_attention: true needs checkpoint_weights_dtype"):
        model_from_hf_config(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 256,
                "num_attention_heads": 4,
                "intermediate_size": 512,
                "vocab_size": 1000,
                "max_position_embeddings": 4096,
                "checkpoint_16bit_attention": True,
            },
            "m",
            "model.yaml",
        )
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
              "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096,
              "quantization_config": gpt_oss}  # fmt: skip
    assert model_from_hf_config(config, "m", "config.json").checkpoint_16bit_attention
    model = load_model("gpt-oss-120b")
    assert model.checkpoint_16bit_attention and model.checkpoint_weights_dtype == "fp4"
    assert [attention_weights_dtype(model, d) for d in ("fp4", "fp8")] == ["bf16", "fp8"]
    assert attention_weights_dtype(load_model("deepseek-v3"), "fp8") == "fp8"
    lay, w = Layouts.of(1), weight_params(model)
    non_expert, _ = block_weight_bytes_per_gpu(model, lay, "fp4")
    # the router and the rest beside the experts at MXFP4's bytes (an E8M0 scale per 32), not NVFP4's 0.5625
    assert float(non_expert[0]) == pytest.approx(w.attention * 2.0 + w.dense * 0.53125)
    # its FLOPs at the 16-bit rate: on a B200, a quarter of the FP4 rate's
    s = Setting(model, load_cluster("dgx-b200"), load_engine("trtllm"), "fp4", "fp8", FittedParameters())
    compute, _ = gemm_pairs(s, lay, np.full(1, 4096.0), np.zeros(1))
    assert s.gemm_rate("bf16") / s.gemm_rate("fp4") == pytest.approx(2250 * 0.78 / (4500 * 0.76 * 2))
    assert float(compute[0, 0]) == pytest.approx(
        2 * 4096 * (w.attention / s.gemm_rate("bf16") + w.dense / s.gemm_rate("fp4"))
    )
    # a runs row of the openai checkpoint reads it from the catalog, one of another shape does not
    shape = {"layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64, "vocab": 201088,
             "experts": 128, "top_k": 4, "ffn_expert": 2880}  # fmt: skip
    row = {"model": {"key": "gpt-oss-120b", "hf_id": "openai/gpt-oss-120b", "shape": shape,
                     "checkpoint": "openai/gpt-oss-120b (MXFP4 weights)"}}  # fmt: skip
    assert model_from_row(row).checkpoint_16bit_attention and model_from_row(row).checkpoint_fp4_format == "mxfp4"
    row["model"]["shape"] = shape | {"layers": 24}
    assert not model_from_row(row).checkpoint_16bit_attention
    # a checkpoint word that names no catalog repository falls back to the row's hf_id
    row["model"] |= {"shape": shape, "checkpoint": "not stated (native weights)"}
    assert model_from_row(row).checkpoint_16bit_attention


@pytest.mark.parametrize(
    ("model", "engine", "weights", "present", "absent"),
    [
        ("llama3-8b", "vllm", "fp8", ("--quantization fp8",), ("# weights",)),
        ("llama3-8b", "sglang", "fp8", ("--quantization fp8",), ("# weights",)),
        (
            "llama3-8b",
            "trtllm",
            "fp8",
            ("trtllm-serve FP8_CHECKPOINT", "# FP8_CHECKPOINT: a pre-quantised fp8 checkpoint of meta-llama/", "-FP8"),
            ("--quant", "trtllm-serve meta-llama"),
        ),
        (
            "llama3-8b",
            "vllm",
            "fp4",
            ("vllm serve FP4_CHECKPOINT", "# FP4_CHECKPOINT: a pre-quantised fp4 checkpoint of", "nvfp4"),
            ("--quant", "vllm serve meta-llama"),
        ),
        ("deepseek-v3", "vllm", "fp8", (), ("--quantization", "# weights")),  # the checkpoint is fp8
        ("deepseek-v3", "vllm", "bf16", ("# weights bf16: the published checkpoint is fp8",), ("--quantization",)),
    ],
)
def test_exports_serve_the_priced_weight_format(model, engine, weights, present, absent) -> None:
    cluster = load_cluster("dgx-b200x2" if model == "deepseek-v3" else "dgx-h100")
    pins = {"tp": 8, "pp": 2} if model == "deepseek-v3" else {}
    ranking = serve_search(load_model(model), cluster, ServeRequest(engine=engine, weights_dtype=weights, **pins))
    text = export_commands(ranking, engine)
    for fragment in present:
        assert fragment in text, text
    for fragment in absent:
        assert fragment not in text, text


def test_export_names_a_local_checkpoint_by_its_folder(tmp_path, cli) -> None:
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(_llama_config())
    r = cli("serve", "--model", str(folder / "config.json"), "--cluster", "dgx-h100", "--export", "vllm")
    assert r.code == 0, r.err
    assert f"vllm serve {folder} " in r.out
    r = cli("serve", "--model", str(folder), "--cluster", "dgx-h100", "--export", "vllm")  # the folder itself
    assert r.code == 0, r.err
    assert f"vllm serve {folder} " in r.out


def _llama_config() -> str:
    return (
        '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, '
        '"num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, '
        '"max_position_embeddings": 8192, "hidden_act": "silu"}'
    )


def test_concurrency_beyond_the_kv_room_says_the_rest_queue() -> None:
    ranking = serve_search(load_model("llama3-8b"), load_cluster("dgx-h100"), ServeRequest(concurrency=10**7))
    room = ranking.candidates[0].max_concurrency
    assert room < 10**7
    assert any(f"concurrency 10000000 exceeds the KV room of #1 ({room}" in w for w in ranking.warnings)
    quiet = serve_search(load_model("llama3-8b"), load_cluster("dgx-h100"), ServeRequest(concurrency=8))
    assert not any("exceeds the KV room" in w for w in quiet.warnings)


def test_no_fit_hint_suggests_a_format_not_already_asked() -> None:
    one = load_cluster("dgx-h100", gpus=1)
    # 7,680 in and 512 out: SGLang's pool (mem_fraction_static of the memory free at start, less the
    # weights) holds three 2K/512 sequences of fp8 70B beside its fp8 shard, not one of 7,936 tokens
    long = {"input_len": 7680, "output_len": 512}
    asked = ServeRequest(engine="sglang", weights_dtype="fp8", kv_dtype="fp8", **long)
    fp8 = serve_search(load_model("llama3-70b"), one, asked)
    assert not fp8.candidates
    assert "--weights-dtype" not in fp8.reason and "--kv-dtype" not in fp8.reason and "more GPUs" in fp8.reason
    assert "tokens of KV cache" in fp8.reason  # the fp8 shard fits; a sequence's cache does not
    kv = serve_search(load_model("llama3-70b"), one, ServeRequest(engine="sglang", weights_dtype="fp8", **long))
    assert "--kv-dtype fp8" in kv.reason and "--weights-dtype" not in kv.reason
    bf16 = serve_search(load_model("llama3-70b"), one, ServeRequest(engine="sglang"))
    # the bf16 shard alone exceeds the GPU: smaller weights, not a smaller cache
    assert "--weights-dtype fp8" in bf16.reason and "--kv-dtype" not in bf16.reason


def test_workload_file_load_yields_to_the_command_line(tmp_path, cli) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("input_len: 512\noutput_len: 128\nconcurrency: 4\nttft_ms: 1e3\n")
    r = cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100", "--workload", str(path), "--request-rate", "3",
            "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert '"request_rate": 3.0' in r.out and '"concurrency": null' in r.out and '"ttft_s": 1.0' in r.out
    path.write_text("ttft_ms: -1\n")
    assert_one_line_error(
        cli("serve", "--model", "llama3-8b", "--cluster", "dgx-h100", "--workload", str(path)),
        "field 'ttft_ms'",
        "positive number of milliseconds",
    )


def test_library_refuses_a_request_longer_than_the_context() -> None:
    with pytest.raises(PlannerError, match="exceed llama3-70b's context of 8192"):
        serve_search(load_model("llama3-70b"), load_cluster("dgx-h100"), ServeRequest(input_len=8000, output_len=512))


def test_a_replica_over_several_hosts_is_launched_on_each() -> None:
    """A review (2026-12-07): 405B at a 60 ms TPOT on two DGX H100 runs one TP8 x PP2 replica over
    both hosts, and the export printed one single-host command. Each engine's own multi-host launch
    now follows it: vLLM on a Ray cluster (or its data-parallel deployment's per-host commands),
    SGLang with --nnodes / --node-rank / --dist-init-addr, TensorRT-LLM as one MPI job."""
    from planner.serving.export import across_hosts

    cluster, model = load_cluster("dgx-h100x2"), load_model("llama3-405b")
    texts = {}
    for engine in ("vllm", "sglang", "trtllm"):
        ranking = serve_search(model, cluster, ServeRequest(engine=engine, tpot_s=0.06))
        assert ranking.gpus_per_host == 8 and ranking.candidates[0].config["gpus_per_replica"] == 16
        texts[engine] = export_commands(ranking, engine)
    assert "# the replica spans 2 hosts of 8 GPUs: start a Ray cluster" in texts["vllm"]
    assert texts["vllm"].rstrip().endswith("--distributed-executor-backend ray")
    assert "--nnodes 2 --node-rank HOST_RANK --dist-init-addr HEAD_IP:5000" in texts["sglang"]
    assert "\nmpirun -n 16 --host HOSTS trtllm-llmapi-launch trtllm-serve " in texts["trtllm"]
    # attention DP over hosts: vLLM's data-parallel deployment, the first host serving, the rest headless
    dp = across_hosts("vllm", "vllm serve m \\\n    --data-parallel-size 16\n# a note", 16, 8, 16, 1, True)
    assert dp.count("vllm serve m") == 2 and dp.count("--data-parallel-size-local 8") == 2
    assert "--data-parallel-start-rank $((8 * HOST_RANK)) --headless" in dp and dp.endswith("\n# a note")
    # one host: the command as it was
    assert (
        across_hosts("sglang", "python -m sglang.launch_server", 8, 8, 8, 1, False) == "python -m sglang.launch_server"
    )


def test_an_instruct_alias_exports_the_instruct_weights(cli) -> None:
    """A review (2026-12-07): `--model llama3-70b-instruct --export vllm` served the base repository.
    The alias now picks the catalog model's instruct repository; the plain name keeps the base."""
    out = {m: cli("serve", "--model", m, "--cluster", "dgx-h100x2", "--export", "vllm").out for m in
           ("llama3-70b-instruct", "llama3-70b", "mixtral-8x7b-instruct")}  # fmt: skip
    assert "vllm serve meta-llama/Meta-Llama-3-70B-Instruct \\" in out["llama3-70b-instruct"]
    assert "vllm serve meta-llama/Meta-Llama-3-70B \\" in out["llama3-70b"]
    assert "vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 \\" in out["mixtral-8x7b-instruct"]


@pytest.mark.parametrize(
    ("engine", "cluster", "hosts"),
    [("vllm", "dgx-h100", "on the host"), ("trtllm", "dgx-h100x2", "on each of 2 hosts")],
)
def test_replicas_sharing_a_host_get_their_own_gpus_and_ports(engine: str, cluster: str, hosts: str) -> None:
    """A review (2026-12-07): several replicas on one host had one command, whose copies all took GPU
    0 and port 8000. Each now runs on its own GPUs and port, in one shell loop a host."""
    ranking = serve_search(load_model("llama3-8b"), load_cluster(cluster), ServeRequest(engine=engine, tp=1, pp=1))
    c = ranking.candidates[0]
    assert c.config["gpus_per_replica"] == 1 and c.config["replicas"] == load_cluster(cluster).num_gpus
    text = export_commands(ranking, engine)
    assert f"# 8 replicas {hosts}, each on its own 1 GPU(s) and port 8000.." in text
    assert "for i in $(seq 0 7); do\n  CUDA_VISIBLE_DEVICES=$i " in text
    assert text.rstrip().endswith("--port $((8000 + i)) &\ndone\nwait")
    # two GPUs a replica: the devices of the i-th pair
    two = serve_search(load_model("llama3-8b"), load_cluster("dgx-h100"), ServeRequest(engine=engine, tp=2, pp=1))
    assert "CUDA_VISIBLE_DEVICES=$(seq -s, $((i * 2)) $((i * 2 + 1)))" in export_commands(two, engine)


@pytest.mark.parametrize("engine", ["trtllm", "trtllm-tensorrt"])
def test_prompts_beyond_the_token_budget_export_chunked_prefill(engine: str) -> None:
    """Prompts longer than TensorRT-LLM's token budget are priced in budget-sized pieces; the export
    turns chunked prefill on, which runs them so (it had said to, and exported without it)."""
    req = ServeRequest(engine=engine, input_len=16000, output_len=256, weights_dtype="bf16")
    ranking = serve_search(load_model("llama3.1-70b"), load_cluster("dgx-h100"), req)
    assert any("priced in budget-sized chunks" in w and "--export turns it on" in w for w in ranking.warnings)
    assert "# extra.yaml: enable_chunked_prefill: true" in export_commands(ranking, engine)
    short = serve_search(load_model("llama3.1-70b"), load_cluster("dgx-h100"), ServeRequest(engine=engine))
    assert "enable_chunked_prefill" not in export_commands(short, engine)


def test_sglang_takes_its_static_memory_fraction_by_tp() -> None:
    """SGLang's mem_fraction_static unset depends on the TP size (server_args.py: 0.88 at 1, 0.87 at 2,
    0.85 at 4, 0.81 at 8, 0.79 at 16); the plan prices it so and the export writes the value priced (a
    review: 0.88 at every TP had overstated TP8's KV room by 7% of HBM)."""
    from planner.serving.engine import load_engine

    sglang = load_engine("sglang")
    assert sglang.memory_fraction(np.array([1, 2, 4, 8, 16, 32])).tolist() == [0.88, 0.87, 0.85, 0.81, 0.79, 0.79]
    assert load_engine("vllm").memory_fraction(np.array([1, 8])).tolist() == [0.9, 0.9]
    model, cluster = load_model("llama3-70b"), load_cluster("dgx-h100")
    ranking = serve_search(model, cluster, ServeRequest(engine="sglang", tp=8, pp=1))
    assert "--mem-fraction-static 0.81" in export_commands(ranking, "sglang")
    # the weights and KV pool the plan gives TP8 take 0.81 of the memory free at start, not 0.88
    m = ranking.candidates[0].memory_breakdown_bytes
    free = cluster.gpu.hbm_capacity_bytes - m.runtime
    assert (m.weights + m.kv_cache) / free == pytest.approx(0.81, rel=1e-9)


@pytest.mark.parametrize(
    ("engine", "fragments"),
    [
        (
            "trtllm",
            (
                "--extra_llm_api_options extra-prefill.yaml",
                "# extra-prefill.yaml: cache_transceiver_config: {backend: UCX}; disable_overlap_scheduler: true",
                "# extra-decode.yaml: cache_transceiver_config: {backend: UCX}",
                'context_servers:\n  num_instances: 2\n  urls: ["HOST_1:8000", "HOST_1:8001"]',
                'generation_servers:\n  num_instances: 1\n  urls: ["HOST_0:8000"]\nEOF\n',
                "EOF\ntrtllm-serve disaggregated -c disagg.yaml",
                "# on HOST_1:\nprefill_server 0,1,2,3 8000 &\nprefill_server 4,5,6,7 8001 &",
            ),
        ),
        (
            "sglang",
            (
                "--disaggregation-mode prefill \\\n"
                "      --host 0.0.0.0 --port $2 --disaggregation-bootstrap-port $3\n}",
                "# on HOST_1:\nprefill_server 0,1,2,3 8000 8998 &\nprefill_server 4,5,6,7 8001 8999 &",
                "sglang_router.launch_router --pd-disaggregation \\\n    --prefill http://HOST_1:8000 8998 \\\n"
                "    --prefill http://HOST_1:8001 8999",
                "--decode http://HOST_0:8000 \\\n    --host 0.0.0.0 --port 8080",
            ),
        ),
        (
            "vllm",
            (
                "NixlConnector",
                "prefill_server() {  # $1 its GPUs (CUDA_VISIBLE_DEVICES), $2 its port, "
                "$3 its VLLM_NIXL_SIDE_CHANNEL_PORT\n"
                "  CUDA_VISIBLE_DEVICES=$1 VLLM_NIXL_SIDE_CHANNEL_PORT=$3 vllm serve",
                "# on HOST_0:\nexport VLLM_NIXL_SIDE_CHANNEL_HOST=HOST_0\n"
                "decode_server 0,1,2,3,4,5,6,7 8000 5600 &\nwait",
                "prefill_server 4,5,6,7 8001 5700 &",
                "# the front end: a proxy that sends each request to one of the 2 prefill server(s)",
                "prefill servers HOST_1:8000, HOST_1:8001; decode servers HOST_0:8000",
            ),
        ),
    ],
)
def test_a_disaggregated_export_joins_its_pools(engine: str, fragments: tuple[str, ...]) -> None:
    """A review (2026-12-07): a disaggregated plan's export printed the two pools' servers and nothing
    that joins them. TensorRT-LLM gets each pool's cache transceiver and its ``trtllm-serve
    disaggregated`` front end over the servers' URLs, SGLang its PD router, vLLM a note on the proxy
    its NIXL P/D takes. 70B on two DGX H100, 4K prompts at a 400 ms TTFT target: 2 prefill replicas
    of TP4, one prompt a round, and one decode replica of TP8. Each server is placed on GPUs and ports
    of its own (``export.placed_pools``: the decode server on the first host, the two prefill servers
    on the second), and the front end names their addresses. (Until 2026-12-08 the case was 2K prompts
    at 500 ms, 4 prefill replicas of TP2; a prefill pool at capacity now runs the prompts its decode
    pool draws, and one TP2 x PP4 replica, 269 ms, ranks first there.)"""
    req = ServeRequest(engine=engine, disaggregate=True, ttft_s=0.4, tpot_s=0.03, input_len=4096)
    ranking = serve_search(load_model("llama3-70b"), load_cluster("dgx-h100x2"), req)
    split = ranking.candidates[0].config["prefill_decode_split"]
    assert (split["prefill_replicas"], split["prefill_tp"], split["decode_replicas"]) == (2, 4, 1)
    text = export_commands(ranking, engine)
    for fragment in fragments:
        assert fragment in text, text


def test_a_long_prompt_in_a_pipelined_prefill_pool_runs_its_pieces_in_turn() -> None:
    """A 16K prompt on TensorRT-LLM's 8K budget runs as two pieces one after the other, at PP 2 as at
    PP 1 (a review: PP 2 had been priced as one piece's pass, 657 ms against 1,268)."""
    from planner.serving.disagg import prefill_rounds
    from planner.serving.layout import Layouts
    from planner.serving.search import resolve_request, setting_for

    model, cluster = load_model("llama3.1-70b"), load_cluster("dgx-h100x2")
    req = resolve_request(model, ServeRequest(engine="trtllm", input_len=16000, output_len=256, disaggregate=True))
    s = setting_for(model, cluster, req)
    rounds, _ = prefill_rounds(s, Layouts.of(4, [1, 2]), req)
    assert rounds[1, 0] > 0.9 * rounds[0, 0]


def test_a_rate_plan_exports_its_kv_room_as_the_batch_cap() -> None:
    """A rate plan's batch is the replay's time mean (5 for 8B at 2 req/s on TP8); the replay admitted
    up to the KV room, so the export caps the batch there (a cap at the mean had queued the Poisson
    bursts: TTFT 22 ms -> 2.1 s)."""
    ranking = serve_search(load_model("llama3-8b"), load_cluster("dgx-h100"), ServeRequest(request_rate=2, tp=8))
    c = ranking.candidates[0]
    assert c.batch_per_replica < 10 and c.max_concurrency >= 1024
    assert "--max-num-seqs 1024" in export_commands(ranking, "vllm")  # the room, at vLLM's cap of 1,024
    # under attention DP the room is each rank's: vLLM's cap of 1,024 holds per DP engine, not per
    # replica (capped per replica, Qwen3-30B-A3B at TP8 with attention DP had exported 1,024 / 8 = 128
    # sequences a rank where the replay admitted 284)
    adp = ServeRequest(request_rate=4, tp=8, attention_dp=True, engine="vllm")
    ranking = serve_search(load_model("qwen3-30b-a3b"), load_cluster("dgx-h100"), adp)
    c = ranking.candidates[0]
    assert c.config["attention_dp"] and c.config["replicas"] == 1 and c.max_concurrency > 1024
    assert _flag(export_commands(ranking, "vllm"), "--max-num-seqs") == math.ceil(c.max_concurrency / 8)


def test_a_disaggregated_rate_plan_says_why_once() -> None:
    """The why line of a rate plan gives the rate's clause, not the throughput ratio as well (a review:
    disaggregated rate plans ended '...; 1.00x the next')."""
    req = ServeRequest(disaggregate=True, request_rate=1, ttft_s=0.3)
    ranking = serve_search(load_model("llama3-70b"), load_cluster("dgx-h100x2"), req)
    why = ranking.candidates[0].why
    assert "x the next" not in why and "every layout serves the offered 1 req/s" in why


def test_servers_are_placed_on_whole_hosts_where_they_span_them() -> None:
    """On an NVL72 rack (trays of 4 GPUs) most servers span trays: a wide server takes a run of whole
    hosts of its own, its first host the head (``export.place_servers``), started as a multi-host
    replica with its hosts named; hosts that start the same servers are written once."""
    from planner.serving.export import place_servers

    assert place_servers([4, 8, 2, 2], 4, 16) == [(2, 0), (0, 0), (3, 0), (3, 2)]
    assert place_servers([8, 8], 4, 12) is None and place_servers([6], 4, 16) is None  # no room; not whole hosts
    assert place_servers([4, 4, 4], 8, 12) == [(0, 0), (0, 4), (1, 0)]  # the last host has 4 GPUs
    assert place_servers([8, 8], 8, 12) is None and place_servers([2, 2], 8, 2) is None
    req = ServeRequest(engine="trtllm", disaggregate=True)
    ranking = serve_search(load_model("deepseek-v3"), load_cluster("gb200-nvl72"), req)
    split = ranking.candidates[0].config["prefill_decode_split"]
    assert (split["prefill_replicas"], split["prefill_gpus"], split["decode_gpus"]) == (10, 40, 32)
    text = export_commands(ranking, "trtllm")
    # two decode servers of 16 GPUs, each on four trays of its own (one of 32 on eight before the fit
    # took each published run's replay, 2026-12-07; the decode layouts tie, the prefill pool bounds the rate)
    for fragment in (
        "# on each of HOST_8 .. HOST_17:\nprefill_server 0,1,2,3 8000 &\nwait",
        "# decode server 1 on HOST_0 .. HOST_3 (head HOST_0)",
        "mpirun -n 16 --host HOST_0:4,HOST_1:4,HOST_2:4,HOST_3:4 trtllm-llmapi-launch trtllm-serve",
        "# decode server 2 on HOST_4 .. HOST_7 (head HOST_4)",
        "mpirun -n 16 --host HOST_4:4,HOST_5:4,HOST_6:4,HOST_7:4 trtllm-llmapi-launch trtllm-serve",
        "--host 0.0.0.0 --port 8000\n# extra-decode.yaml",
        '  urls: ["HOST_0:8000", "HOST_4:8000"]',
    ):
        assert fragment in text, text
    assert "PREFILL_" not in text and "HEAD_IP" not in text and "HOSTS" not in text


def test_an_attention_dp_export_says_what_the_plan_assumes_of_its_ranks() -> None:
    """The replay prices attention-DP ranks in step (each rank's prompts in the same iterations);
    TensorRT-LLM's in-flight batching runs them apart unless its ADP balance is on, so a co-located
    export says so, and a disaggregated one (no prompt beside the decode) does not."""
    note = "the plan prices the attention-DP ranks in step"
    req = ServeRequest(engine="trtllm", request_rate=4.0, attention_dp=True, tp=8)
    ranking = serve_search(load_model("deepseek-v3"), load_cluster("dgx-h200"), req)
    assert ranking.candidates[0].config["attention_dp"] and note in export_commands(ranking, "trtllm")
    split = serve_search(
        load_model("deepseek-v3"), load_cluster("dgx-h200x2"), req.model_copy(update={"disaggregate": True})
    )
    assert note not in export_commands(split, "trtllm")


def test_trtllm_exports_the_batch_per_pipeline_micro_batch() -> None:
    # TensorRT-LLM admits pp x max_batch_size active requests (PyTorchModelEngine.get_max_num_sequences),
    # so 70B at TP4 x PP2 priced at its batch for a 30 ms TPOT exports half of it (it had exported the
    # whole batch, which admits twice what was priced: a review, 2026-12-07)
    ranking = serve_search(
        load_model("llama3-70b"), load_cluster("dgx-h100"), ServeRequest(engine="trtllm", tp=4, pp=2, tpot_s=0.03)
    )
    top = ranking.candidates[0]
    assert (top.config["tp"], top.config["pp"]) == (4, 2)
    batch = math.ceil(round(top.batch_per_replica, 6))
    assert batch > 2
    assert _flag(export_commands(ranking, "trtllm"), "--max_batch_size") == math.ceil(batch / 2)
    vllm = serve_search(load_model("llama3-70b"), load_cluster("dgx-h100"), ServeRequest(tp=4, pp=2, tpot_s=0.03))
    # vLLM's --max-num-seqs caps the running requests of its one scheduler, every micro-batch's together
    assert _flag(export_commands(vllm, "vllm"), "--max-num-seqs") == math.ceil(
        round(vllm.candidates[0].batch_per_replica, 6)
    )


def test_a_closed_loop_holds_the_servers_request_path_in_its_cycle() -> None:
    # 64 in flight of 128 prompt and 2 output tokens: a client's cycle is its TTFT (the path included)
    # and one TPOT, so the throughput is Little's law over the printed figures (it had left the 6.9 ms
    # path out of the cycle: 451 tokens/s per GPU where the printed TTFT and TPOT give 377)
    req = ServeRequest(input_len=128, output_len=2, concurrency=64, tp=1)
    top = serve_search(load_model("llama3-8b"), load_cluster("dgx-h100"), req).candidates[0]
    gpus = top.config["replicas"] * top.config["tp"] * top.config["pp"]
    cycle_s = top.ttft_s + (req.output_len - 1) * top.tpot_s
    assert top.output_tokens_per_s_per_gpu == pytest.approx(64 / cycle_s * req.output_len / gpus, rel=1e-9)
    assert load_engine("vllm").parameters("hopper").request_path_s > 0.005


def test_an_mxfp4_checkpoint_is_priced_at_its_32_value_blocks() -> None:
    from planner.serving.memory import MXFP4_WEIGHT_BYTES, WEIGHT_BYTES, weight_bytes

    gpt_oss, llama = load_model("gpt-oss-120b"), load_model("llama3-70b")
    assert gpt_oss.checkpoint_fp4_format == "mxfp4"
    assert weight_bytes(gpt_oss, "fp4") == MXFP4_WEIGHT_BYTES == 0.5 + 1 / 32
    assert weight_bytes(llama, "fp4") == WEIGHT_BYTES["fp4"] == 0.5 + 1 / 16  # NVFP4, what fp4 quantizes to
    assert weight_bytes(gpt_oss, "fp8") == 1.0
    # one H100: 114.7 B routed-expert weights at 0.53125 bytes, the attention and embeddings 16-bit
    ranking = serve_search(gpt_oss, load_cluster("dgx-h100").model_copy(update={"num_gpus": 1}), ServeRequest(tp=1))
    weights_gib = ranking.candidates[0].memory_breakdown_bytes.weights / 2**30
    assert 60.5 < weights_gib < 61.5, weights_gib  # 64.0 GiB at NVFP4's bytes
    from planner.hf_config import checkpoint_fp4_format

    assert checkpoint_fp4_format({"quant_method": "mxfp4"}) == "mxfp4"
    assert checkpoint_fp4_format({"quant_method": "modelopt", "quant_algo": "NVFP4"}) == "nvfp4"
    assert checkpoint_fp4_format({"quant_method": "fp8"}) is None
    with pytest.raises(ValueError, match="checkpoint_fp4_format mxfp4 needs checkpoint_weights_dtype fp4"):
        type(llama).model_validate(llama.model_dump() | {"checkpoint_fp4_format": "mxfp4"})


def test_trtllm_refuses_nvfp4_off_blackwell_but_runs_gpt_oss_mxfp4(cli) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(
        cli("serve", "--model", "llama70b", "--cluster", "dgx-h100x1", "--weights-dtype", "fp4", "--engine", "trtllm"),
        "--weights-dtype fp4: trtllm runs NVFP4 on blackwell",
        "nvfp4_architectures",
    )
    assert serve_search(load_model("gpt-oss-120b"), load_cluster("dgx-h100"), ServeRequest(engine="trtllm")).candidates
    assert serve_search(
        load_model("llama3-70b"), load_cluster("dgx-b200"), ServeRequest(engine="trtllm", weights_dtype="fp4")
    ).candidates
    # vLLM runs NVFP4 weight-only on Hopper (its Marlin kernels): priced so, with the W4A16 warning
    vllm = serve_search(load_model("llama3-70b"), load_cluster("dgx-h100"), ServeRequest(weights_dtype="fp4"))
    assert any("W4A16" in w for w in vllm.warnings)


def test_sglang_takes_its_static_fraction_of_the_memory_free_at_start() -> None:
    # mem_fraction_static bounds weights + KV pool (model_runner profile_max_num_token); the
    # activations and CUDA graphs come out of the rest, not out of the pool
    cluster = load_cluster("dgx-h100")
    ranking = serve_search(load_model("llama3-70b"), cluster, ServeRequest(engine="sglang", tp=8, tpot_s=0.03))
    m = ranking.candidates[0].memory_breakdown_bytes
    fraction = load_engine("sglang").memory_fraction(np.array([8.0]))[0]
    hbm = cluster.gpu.hbm_capacity_bytes
    assert m.kv_cache == pytest.approx(fraction * (hbm - m.runtime) - m.weights, rel=1e-9)
    assert m.activations > 0  # outside the pool


def test_a_config_file_of_any_name_exports_its_folder(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from planner.serving.export import checkpoint_name

    config = tmp_path / "cfg_llama.json"
    config.write_text("{}")
    # its stem ('cfg_llama') is neither a path nor a Hub repository, which an engine would try to download
    assert checkpoint_name("cfg_llama", str(config)) == str(tmp_path)
    assert checkpoint_name("llama3-70b", str(tmp_path / "config.json")) == str(tmp_path)
    assert checkpoint_name("llama3-70b", "llama70b") == "meta-llama/Meta-Llama-3-70B"


def test_a_lone_prompt_under_attention_dp_runs_its_attention_on_one_rank() -> None:
    # a rank holds whole sequences under attention DP, so one 32K prompt's attention runs on the rank that
    # has it: its TTFT had been 0.32 s, below the 0.41 s its attention FLOPs need on one H100 at peak
    import planner

    model = planner.load_model("qwen3-30b-a3b")  # 48 layers, 32 query heads of 128: (d_qk + d_v) = 256
    s = 32_000
    floor_s = model.num_hidden_layers * 2.0 * 32 * 256 * s * s / 2 / 989e12
    ask = dict(engine="sglang", input_len=s, output_len=64, tp=8, pp=1, concurrency=1, top=1)
    dp = planner.serve(model, "dgx-h100x1", attention_dp=True, **ask).candidates[0]
    tp = planner.serve(model, "dgx-h100x1", attention_dp=False, **ask).candidates[0]
    assert dp.config["attention_dp"] and dp.ttft_s > floor_s > 0.4
    assert dp.ttft_s > tp.ttft_s  # TP 8 splits the prompt's heads over the 8 ranks; attention DP does not


def test_a_lone_request_on_per_rank_schedulers_is_replayed_on_its_rank_alone() -> None:
    # vLLM schedules each attention-DP rank apart; one request in flight had been replayed beside one on
    # each of the 7 other ranks (every rank alike), and came out slower than on TP 1 (2.34 s against 1.54)
    import planner

    ask = dict(engine="vllm", input_len=32_000, output_len=256, pp=1, concurrency=1, top=1)
    dp = planner.serve("qwen3-30b-a3b", "dgx-h100x1", tp=8, attention_dp=True, **ask).candidates[0]
    one = planner.serve("qwen3-30b-a3b", "dgx-h100x1", tp=1, **ask).candidates[0]
    sglang = planner.serve(
        "qwen3-30b-a3b", "dgx-h100x1", tp=8, attention_dp=True, **{**ask, "engine": "sglang"}
    ).candidates[0]
    assert dp.batch_per_replica == 1.0 and dp.ttft_s < one.ttft_s
    assert dp.ttft_s == pytest.approx(sglang.ttft_s, rel=0.01)  # one scheduler or eight: one prompt on one rank
    # Little's law over the one request: its output over its time in the engine, per GPU of the replica
    cycle = dp.ttft_s + (256 - 1) * dp.tpot_s
    assert dp.output_tokens_per_s_per_gpu == pytest.approx(256 / cycle / 8, rel=0.02)


def test_a_disaggregated_plan_at_capacity_prefills_the_prompts_its_decode_pool_draws() -> None:
    # the decode pool bounds 70B's split on two DGX H100 at a 30 ms TPOT; its prefill replicas need not
    # run full budgets: without a TTFT target the same split had quoted 1,020 ms of TTFT (a full round),
    # with a 500 ms target 272 ms at the same throughput
    import planner

    ask = dict(disaggregate=True, tpot_s=0.030, top=1)
    free = planner.serve("llama70b", "dgx-h100x2", **ask).candidates[0]
    held = planner.serve("llama70b", "dgx-h100x2", ttft_s=0.5, **ask).candidates[0]
    assert free.output_tokens_per_s_per_gpu == pytest.approx(held.output_tokens_per_s_per_gpu)
    assert free.ttft_s == pytest.approx(held.ttft_s, rel=0.01) and free.ttft_s < 0.3

"""Catalog: names, aliases, cluster-name grammar, YAML and config.json paths, sources."""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path

import pytest
import yaml

import planner
from planner.catalog import catalog_dir, list_profiles, load_cluster, load_model, model_names, profile_names
from planner.errors import PlannerError
from planner.hf_config import unfamiliar_type_note
from planner.schemas.base import misread_value

REQUIRED_MODELS = {
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "gpt-oss-120b",
    "gpt-oss-20b",
    "gpt2-124m",
    "gpt-1.7b",
    "gpt-3.6b",
    "gpt-7.5b",
    "gpt-18.4b",
    "gpt-39.1b",
    "gpt-76.1b",
    "gpt-145.6b",
    "gpt-310.1b",
    "gpt-529.6b",
    "gpt-1t",
    "gpt-22b",
    "bloom-176b",
}
REQUIRED_PROFILES = {"dgx-a100-80g", "dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72", "mi300x", "localhost-cpu"}


def test_catalog_holds_every_required_entry() -> None:
    assert REQUIRED_MODELS <= set(model_names())
    assert REQUIRED_PROFILES <= set(profile_names())


@pytest.mark.parametrize("kind", ["models", "hardware_profiles"])
def test_file_name_matches_name_key(kind: str) -> None:
    for path in catalog_dir(kind).glob("*.yaml"):
        assert yaml.safe_load(path.read_text())["name"] == path.stem, path


def test_aliases_are_unique_and_resolve() -> None:
    seen: dict[str, str] = {}
    for path in catalog_dir("models").glob("*.yaml"):
        for alias in yaml.safe_load(path.read_text()).get("aliases", []):
            assert alias.lower() not in seen, (alias, path.stem, seen.get(alias.lower()))
            assert alias.lower() not in model_names()
            seen[alias.lower()] = path.stem
    assert load_model("llama70b").name == "llama3-70b"
    assert load_model("LLAMA70B").name == "llama3-70b"


def test_every_profile_number_has_a_source() -> None:
    # The schema refuses a number without a source; here we also refuse empty source texts.
    for profile in list_profiles():
        for obj in (profile, profile.gpu, profile.intra_node, profile.inter_node):
            assert obj.sources, profile.name
            assert all(len(text.strip()) > 10 for text in obj.sources.values()), (profile.name, obj.sources)


def test_a_host_count_must_divide_the_node(tmp_path: Path) -> None:
    text = (catalog_dir("hardware_profiles") / "gb200-nvl72.yaml").read_text()
    assert "gpus_per_host: 4\n" in text
    bad = tmp_path / "rack.yaml"
    bad.write_text(text.replace("gpus_per_host: 4\n", "gpus_per_host: 5\n", 1))
    with pytest.raises(PlannerError, match="gpus_per_host 5 does not divide gpus_per_node 72"):
        load_cluster(str(bad))
    assert load_cluster("gb200-nvl72x2").gpus_per_host == 4 and load_cluster("dgx-b200").gpus_per_host == 8
    # a host link to offload over needs the host memory the offloaded activations fill
    bad.write_text(text.replace("  host_memory_gib: 223.5\n", "", 1))
    with pytest.raises(PlannerError, match="host_link_gb_per_s needs host_memory_gib"):
        load_cluster(str(bad))


def test_cluster_name_grammar() -> None:
    c = load_cluster("dgx-h100x16")
    assert (c.num_nodes, c.gpus_per_node, c.num_gpus) == (16, 8, 128)
    assert c.describe().startswith("dgx-h100x16: 16 nodes x 8 ")
    assert c.describe().endswith("= 128 GPUs")
    assert load_cluster("dgx-h100").num_gpus == 8
    assert load_cluster("mi300xx4").num_gpus == 32
    assert load_cluster("mi300x").num_gpus == 8
    assert load_cluster("dgx-h100x16", nodes=2).num_gpus == 16
    partial = load_cluster("dgx-h100", gpus=12)
    assert (partial.num_nodes, partial.num_gpus) == (2, 12)
    assert partial.describe().endswith("= 12 GPUs (the last node's 4 of 8)")


def test_cluster_yaml_files(tmp_path: Path) -> None:
    cluster_file = tmp_path / "mine.yaml"
    cluster_file.write_text("name: my-pod\nprofile: dgx-h200\nnum_nodes: 4\n")
    c = load_cluster(str(cluster_file))
    assert (c.name, c.num_gpus, c.gpu.name) == ("my-pod", 32, load_cluster("dgx-h200").gpu.name)
    # A plain profile YAML is one node.
    profile_file = catalog_dir("hardware_profiles") / "dgx-b200.yaml"
    assert load_cluster(str(profile_file)).num_gpus == load_cluster("dgx-b200").num_gpus


def test_flags_and_numbers_are_not_interchanged(tmp_path: Path) -> None:
    """A config.json with 'true' for a layer count is refused by the library with the field named, as
    are a bool inside a list of numbers and a number where a flag belongs (``schemas.base.misread_value``)."""
    hf = tmp_path / "config.json"
    config = {
        "model_type": "llama",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_attention_heads": 8,
        "num_hidden_layers": True,
        "vocab_size": 1000,
        "max_position_embeddings": 512,
    }
    hf.write_text(json.dumps(config))
    with pytest.raises(PlannerError, match=r"num_hidden_layers.*expected a number, got true"):
        load_model(str(hf))
    assert misread_value(list[int], [1, 2, False]) == "expected a number, got false"
    assert misread_value(tuple[float, float] | None, (1.0, True)) == "expected a number, got true"
    assert misread_value(dict[str, int], {"a": 1, "b": True}) == "expected a number, got true"
    assert misread_value(bool | None, 0) == "expected true or false, got 0"
    assert misread_value(bool, "yes") == "expected true or false, got 'yes'"
    assert [misread_value(a, v) for a, v in [(int | None, None), (float, 2), (bool, True), (str, True)]] == [None] * 4


def test_model_yaml_path_and_hf_config(tmp_path: Path) -> None:
    src = catalog_dir("models") / "llama3-8b.yaml"
    copy = tmp_path / "my-llama.yaml"
    copy.write_text(src.read_text())
    assert load_model(str(copy)).parameter_counts.total == load_model("llama3-8b").parameter_counts.total

    # A Llama 3 8B config.json as published on the Hugging Face hub (trimmed of nothing we use).
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-05,
        "bos_token_id": 128000,
    }
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf))
    m = load_model(str(folder / "config.json"))
    assert m.name == "Meta-Llama-3-8B"
    assert m.parameter_counts.total == 8_030_261_248

    # GPT-2 spells its keys differently (n_layer, n_embd, ...).
    gpt2 = {
        "model_type": "gpt2",
        "n_layer": 12,
        "n_embd": 768,
        "n_head": 12,
        "n_positions": 1024,
        "vocab_size": 50257,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "n_inner": None,
    }
    (tmp_path / "gpt2.json").write_text(json.dumps(gpt2))
    m = load_model(str(tmp_path / "gpt2.json"))
    assert m.parameter_counts.total == 124_439_808
    assert m.name == "gpt2"  # a file not named config.json names the model itself, not its folder


def test_unknown_names_suggest_close_matches() -> None:
    with pytest.raises(PlannerError, match="did you mean llama3-70b"):
        load_model("llama3-70")
    with pytest.raises(PlannerError, match=r"unknown cluster 'dgx-h10x16'.*dgx-h100x16"):
        load_cluster("dgx-h10x16")
    # a known profile with a node count below 1 says so (x-1 had read as an unknown cluster)
    for name in ("dgx-h100x0", "dgx-h100x-1"):
        with pytest.raises(PlannerError, match=f"^cluster '{name}': node count must be at least 1$"):
            load_cluster(name)


def test_gpus_flag_alone_rederives_the_node_count() -> None:
    c = load_cluster("dgx-h100x16", gpus=12)
    assert (c.num_nodes, c.num_gpus) == (2, 12)
    with pytest.raises(PlannerError, match="num_gpus 12 leaves a node of the 16 empty"):
        load_cluster("dgx-h100x16", nodes=16, gpus=12)


def test_node_overrides_rename_catalog_clusters_only(tmp_path: Path) -> None:
    assert load_cluster("dgx-h100x2", nodes=16).name == "dgx-h100x16"
    assert load_cluster("dgx-h100x16", gpus=12).name == "dgx-h100x2-12gpus"  # loads back as 12 GPUs
    assert load_cluster("dgx-h100", nodes=3).name == "dgx-h100x3"
    assert load_cluster("DGX-H100x2").name == "DGX-H100x2"  # as typed where nothing overrides it
    assert load_cluster(load_cluster("dgx-h100x4"), nodes=1).name == "dgx-h100x1"
    (tmp_path / "pod.yaml").write_text("name: my-pod\nprofile: dgx-h100\nnum_nodes: 2\n")
    assert load_cluster(str(tmp_path / "pod.yaml"), nodes=4).name == "my-pod"


@pytest.mark.parametrize(("name", "gpus", "echoed"), [
    ("dgx-h100", 12, "dgx-h100x2-12gpus"),
    ("dgx-h100", 3, "dgx-h100x1-3gpus"),
    ("gb200-nvl72", 256, "gb200-nvl72x4-256gpus"),  # four racks' job segments of 64
    ("dgx-h100", 16, "dgx-h100x2"),
])  # fmt: skip
def test_a_cluster_loads_back_from_the_name_it_is_echoed_under(name: str, gpus: int, echoed: str) -> None:
    """12 GPUs of DGX H100 had been echoed as dgx-h100x2 (in every ranking, estimate and serve
    result), which loads 16 (a review, 2026-12-07)."""
    cluster = load_cluster(name, gpus=gpus)
    again = load_cluster(cluster.name)
    assert cluster.name == echoed and (again.name, again.num_nodes, again.num_gpus) == (echoed, cluster.num_nodes, gpus)
    assert load_cluster(echoed, nodes=3).name == f"{name}x3"  # --nodes wins over both of the name's counts
    assert load_cluster(cluster, nodes=3).name == f"{name}x3"  # as it does over a ClusterSpec of that name
    with pytest.raises(PlannerError, match="dgx-h100x1-12gpus: num_gpus 12 exceeds 1 nodes x 8 GPUs"):
        load_cluster("dgx-h100x1-12gpus")


def test_hf_config_quirks(tmp_path: Path) -> None:
    # Gemma: gated GELU (GeGLU) under the key hidden_activation.
    gemma = {
        "model_type": "gemma",
        "hidden_size": 3072,
        "intermediate_size": 24576,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "num_hidden_layers": 28,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True,
    }
    (tmp_path / "gemma.json").write_text(json.dumps(gemma))
    m = load_model(str(tmp_path / "gemma.json"))
    assert m.is_gated_mlp and m.parameter_counts.dense_mlp_per_layer == 3 * 3072 * 24576
    # Expert keys set to 0 mean a dense model.
    dense = {
        "model_type": "qwen2_moe",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 512,
        "num_experts": 0,
        "num_experts_per_tok": 0,
    }
    (tmp_path / "dense.json").write_text(json.dumps(dense))
    assert not load_model(str(tmp_path / "dense.json")).is_moe


def _hf(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return path


def test_bloom_config_reads_as_the_catalog_bloom(tmp_path: Path) -> None:
    """bigscience/bloom's config.json states no MLP width, biases, position scheme or context
    (BloomConfig leaves them to its class): read as the catalog's BLOOM, 176,247,242,752 parameters
    (the paper's 176,247,271,424 less the embedding LayerNorm the catalog notes it leaves out)."""
    bloom = {
        "architectures": ["BloomForCausalLM"],
        "model_type": "bloom",
        "hidden_size": 14336,
        "n_head": 112,
        "n_inner": None,
        "n_layer": 70,
        "layer_norm_epsilon": 1e-05,
        "vocab_size": 250880,
        "offset_alibi": 100,
        "pretraining_tp": 4,
    }
    m = load_model(str(_hf(tmp_path, "bloom", bloom)))
    ref = load_model("bloom-176b")
    assert m.parameter_counts.total == ref.parameter_counts.total == 176_247_242_752
    read = ("intermediate_size", "position_embedding_type", "max_position_embeddings", "mlp_bias", "hidden_act")
    assert [getattr(m, k) for k in read] == [57344, "alibi", 2048, True, "gelu"]
    assert unfamiliar_type_note(m) is None
    # a stated seq_length is its context (bigscience/bloom-560m's configs carry one in some revisions)
    assert load_model(str(_hf(tmp_path, "bloom-4k", {**bloom, "seq_length": 4096}))).max_position_embeddings == 4096


def test_an_unfamiliar_model_type_is_priced_with_a_warning(tmp_path: Path) -> None:
    """A type no reading knows is counted from Llama's keys and defaults, and every plan says so
    (EleutherAI/gpt-neox-20b's config: its LayerNorm is read from layer_norm_eps; its partial
    rotary and parallel block change no parameter count)."""
    neox = {
        "model_type": "gpt_neox",
        "hidden_size": 6144,
        "num_attention_heads": 64,
        "num_hidden_layers": 44,
        "intermediate_size": 24576,
        "vocab_size": 50432,
        "hidden_act": "gelu_fast",
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": 2048,
        "rotary_pct": 0.25,
        "use_parallel_residual": True,
    }
    m = load_model(str(_hf(tmp_path, "gpt-neox-20b", neox)))
    note = unfamiliar_type_note(m)
    assert note is not None and note.startswith("model_type 'gpt_neox' is not a family the planner reads by name")
    assert "layernorm, plain MLP, rope positions, biases off, embeddings untied" in note
    est = planner.estimate(m, "dgx-h100x2", tp=8, pp=2, global_batch_size=64, seq_len=2048)
    assert note in est.warnings
    assert unfamiliar_type_note(load_model("llama3-8b")) is None  # a family read by name
    assert unfamiliar_type_note(load_model("gpt3-175b")) is None  # a catalog model stating no type


def test_hf_families_follow_their_config_class_defaults(tmp_path: Path) -> None:
    # google/gemma-2-9b's config.json leaves tie_word_embeddings out: Gemma2Config's default is
    # True (read as untied it counted 10.16 B, +9.9%); its sliding window covers every other layer
    gemma2 = {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 3584,
        "intermediate_size": 14336,
        "max_position_embeddings": 8192,
        "num_attention_heads": 16,
        "num_hidden_layers": 42,
        "num_key_value_heads": 8,
        "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-06,
        "sliding_window": 4096,
        "vocab_size": 256000,
    }
    m = load_model(str(_hf(tmp_path, "gemma-2-9b", gemma2)))
    assert m.tie_word_embeddings and m.parameter_counts.total == pytest.approx(9.24e9, rel=0.005)  # model card
    assert m.layer_types is not None and m.layer_types[:2] == ["sliding_attention", "full_attention"]
    assert m.layer_types.count("sliding_attention") == 21
    # gpt-oss: the config names neither its sink logits nor its expert biases (GptOssAttention.sinks,
    # GptOssExperts' biases): the model type does; 116.83 B as the model card, the catalog's count
    gpt_oss = {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "max_position_embeddings": 131072,
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "num_local_experts": 128,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "vocab_size": 201088,
    }
    oss = load_model(str(_hf(tmp_path, "gpt-oss-120b", gpt_oss)))
    assert oss.attention_sinks and oss.mlp_bias and oss.num_sliding_layers == 18
    assert oss.parameter_counts.total == load_model("gpt-oss-120b").parameter_counts.total
    # Qwen2-VL keeps its language model at the top level beside vision_config: the language
    # model is planned (Qwen2-7B's 7.62 B) and the vision encoder named as left out
    qwen2_vl = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "attention_bias": True,
        "vision_config": {"depth": 32, "embed_dim": 1280, "hidden_size": 3584},
    }
    vl = load_model(str(_hf(tmp_path, "Qwen2-VL-7B", qwen2_vl)))
    assert vl.parameter_counts.total == pytest.approx(7.62e9, rel=0.005)
    assert "vision_config" in vl.notes and "not counted" in vl.notes
    # a nested text_config (Llava, Gemma-3, Llama-4) is read in place of the top level
    nested = {"model_type": "llava", "text_config": {**qwen2_vl, "model_type": "qwen2"}, "vision_config": {}}
    nested["text_config"].pop("vision_config")
    inner = load_model(str(_hf(tmp_path, "llava-qwen2", nested)))
    assert inner.parameter_counts.total == vl.parameter_counts.total and "vision_config" in inner.notes


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (
            {
                "model_type": "jamba",
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 14336,
                "vocab_size": 65536,
                "max_position_embeddings": 262144,
                "attn_layer_period": 8,
                "expert_layer_period": 2,
                "num_experts": 16,
                "mamba_d_state": 16,
            },
            "model_type 'jamba' has state-space (Mamba) layers",
        ),
        (
            {
                "model_type": "mamba",
                "hidden_size": 2560,
                "num_hidden_layers": 64,
                "vocab_size": 50280,
                "state_size": 16,
            },
            "model_type 'mamba' has state-space (Mamba) layers",
        ),
        (
            {  # read only for Llama 4's model types, whose widths _llama4_fields knows
                "model_type": "other_moe",
                "hidden_size": 5120,
                "num_hidden_layers": 48,
                "num_attention_heads": 40,
                "intermediate_size": 8192,
                "num_local_experts": 16,
                "num_experts_per_tok": 1,
                "interleave_moe_layer_step": 2,
                "vocab_size": 202048,
                "max_position_embeddings": 10485760,
            },
            "key 'interleave_moe_layer_step'",
        ),
    ],
)
def test_hf_configs_the_planner_cannot_count_are_refused_by_name(tmp_path: Path, config: dict, fragment: str) -> None:
    # Jamba was counted +78% with its Mamba layers as attention and expert_layer_period ignored
    with pytest.raises(PlannerError, match=re.escape(fragment)):
        load_model(str(_hf(tmp_path, str(config["model_type"]), config)))


_BASE = {"hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
         "intermediate_size": 5120, "vocab_size": 151936, "max_position_embeddings": 32768}  # fmt: skip


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        # each was priced as a plain transformer with no warning before
        (
            {"model_type": "kimi_linear", "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4]}},
            "key 'linear_attn_config' (Kimi Linear's KDA (linear attention) layers) is not modelled",
        ),
        (
            {"model_type": "minimax", "attn_type_list": [0, 0, 0, 1]},
            "key 'attn_type_list' marks 3 of 4 layers as lightning (linear) attention",
        ),
        (
            {
                "model_type": "qwen3_next",
                "linear_num_value_heads": 32,
                "layer_types": ["linear_attention"] * 3 + ["full_attention"],
            },
            "key 'linear_num_value_heads' (Qwen3-Next's Gated DeltaNet",
        ),
        (
            {"model_type": "qwen3_next", "layer_types": ["linear_attention"] * 3 + ["full_attention"]},
            "key 'layer_types' names 'linear_attention' layers, which are not modelled; allowed: chunked_attention, "
            "full_attention, sliding_attention",
        ),
        (
            {"model_type": "lfm2", "layer_types": ["conv", "conv", "full_attention", "conv"]},
            "key 'layer_types' names 'conv' layers",
        ),
        ({"model_type": "deepseek_v32", "index_topk": 2048}, "key 'index_topk' (DeepSeek Sparse Attention"),
        ({"model_type": "gemma3n_text", "altup_num_inputs": 4}, "key 'altup_num_inputs'"),
        ({"hybrid_override_pattern": "M*M-"}, "key 'hybrid_override_pattern' (Mamba-2, attention, MLP and MoE"),
        (
            {"model_type": "nemotron_h", "hybrid_override_pattern": "M*M-", "moe_latent_size": 1024},
            "moe_latent_size without experts",
        ),
        ({"model_type": "nemotron_h"}, "key 'hybrid_override_pattern': a NemotronH config needs its layer pattern"),
        ({"model_type": "rwkv"}, "model_type 'rwkv' is built from recurrent (linear-attention) blocks"),
        # ERNIE-4.5-300B-A47B was priced as a 47.9 B dense model, its experts under keys left unread
        (
            {"model_type": "ernie4_5_moe", "moe_num_experts": 64, "moe_k": 8, "moe_intermediate_size": 3584},
            "key 'moe_num_experts' declares experts in a way the planner does not read",
        ),
        ({"num_experts": 64, "moe_topk": 8}, "key 'moe_topk' declares experts"),
        ({"model_type": "nemotron-nas", "block_configs": [{"attention": {"no_op": True}}]}, "key 'block_configs'"),
        ({"model_type": "mllama_text_model", "cross_attention_layers": [3, 8]}, "key 'cross_attention_layers'"),
    ],
)
def test_hf_layers_the_planner_cannot_price_are_refused_by_name(tmp_path: Path, config: dict, fragment: str) -> None:
    with pytest.raises(PlannerError, match=re.escape(fragment)):
        load_model(str(_hf(tmp_path, "m", {**_BASE, **config})))


def test_a_sliding_window_pattern_leaves_every_nth_layer_full(tmp_path: Path) -> None:
    # google/gemma-3-27b-pt's text config: sliding_window 1024, sliding_window_pattern 6 and no
    # layer_types; the window had been priced on all 62 layers, it runs on 52
    g3 = {"model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
          "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
          "max_position_embeddings": 131072, "sliding_window": 1024, "sliding_window_pattern": 6}  # fmt: skip
    m = load_model(str(_hf(tmp_path, "g3", g3)))
    assert (m.num_sliding_layers, m.layer_types[4], m.layer_types[5]) == (52, "sliding_attention", "full_attention")
    assert round(m.parameter_counts.total / 1e9, 1) == 27.0  # tied embeddings (Gemma3TextConfig's default)


def test_qwen2s_window_applies_only_where_it_is_switched_on(tmp_path: Path) -> None:
    # Qwen/Qwen2.5-7B's config.json: sliding_window 131072 with use_sliding_window false (transformers
    # Qwen2Config sets no window then); every layer had been priced windowed
    q = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
         "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
         "sliding_window": 131072, "max_window_layers": 28, "use_sliding_window": False}  # fmt: skip
    off = load_model(str(_hf(tmp_path, "off", q)))
    assert off.sliding_window is None and off.num_sliding_layers == 0
    # switched on, the window runs from layer max_window_layers on
    on = load_model(str(_hf(tmp_path, "on", {**q, "use_sliding_window": True, "sliding_window": 4096,
                                              "max_window_layers": 20})))  # fmt: skip
    assert (on.sliding_window, on.num_sliding_layers, on.layer_types[19], on.layer_types[20]) == (
        4096, 8, "full_attention", "sliding_attention"
    )  # fmt: skip
    # switched on without max_window_layers: transformers' default 28 (the last 0 of 28 layers here)
    default = {k: v for k, v in q.items() if k != "max_window_layers"}
    assert load_model(str(_hf(tmp_path, "dflt", {**default, "use_sliding_window": True}))).num_sliding_layers == 0
    with pytest.raises(PlannerError, match="key 'use_sliding_window': expected true or false, got 'no'"):
        load_model(str(_hf(tmp_path, "bad", {**q, "use_sliding_window": "no"})))


def test_qwen2s_qkv_bias_is_read_from_its_model_type(tmp_path: Path) -> None:
    # Qwen2's config.json states no attention_bias, yet its q/k/v projections carry one (transformers
    # Qwen2Attention bias=True): the Megatron export had written --disable-bias-linear alone
    q = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
         "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
         "max_position_embeddings": 32768}  # fmt: skip
    m = load_model(str(_hf(tmp_path, "qwen2", q)))
    assert m.attention_bias and not m.mlp_bias
    assert not load_model(str(_hf(tmp_path, "stated", {**q, "attention_bias": False}))).attention_bias
    assert not load_model(str(_hf(tmp_path, "llama", {**q, "model_type": "llama"}))).attention_bias


def test_routing_keys_and_the_ling_shared_expert_spelling_are_read(tmp_path: Path) -> None:
    # keys that route or weigh the loss are not refused; Ling's num_shared_experts is DeepSeek's
    moe = {**_BASE, "num_experts": 16, "num_experts_per_tok": 2, "moe_intermediate_size": 512,
           "router_aux_loss_coef": 0.01, "norm_topk_prob": True, "num_shared_experts": 1}  # fmt: skip
    m = load_model(str(_hf(tmp_path, "m", moe)))
    assert (m.num_experts_total, m.n_shared_experts, m.shared_expert_width) == (16, 1, 512)


def test_the_load_balancing_coefficient_follows_the_config_class(tmp_path: Path) -> None:
    # a Mixtral or Llama 4 config.json without router_aux_loss_coef trains with its class's default
    # (transformers 4.57.1 MixtralConfig and Llama4TextConfig: 0.001), which the Megatron export
    # writes; a stated value wins (Mixtral-8x7B's 0.02); a type of no known class states none
    mixtral = {**_BASE, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
    assert load_model(str(_hf(tmp_path, "m", mixtral))).router_aux_loss_coef == 0.001
    stated = {**mixtral, "router_aux_loss_coef": 0.02}
    assert load_model(str(_hf(tmp_path, "s", stated))).router_aux_loss_coef == 0.02
    scout = {**_LLAMA4_TEXT, "num_local_experts": 16, "interleave_moe_layer_step": 1}
    assert load_model(str(_hf(tmp_path, "l4", scout))).router_aux_loss_coef == 0.001
    other = {**mixtral, "model_type": "my_moe"}
    assert load_model(str(_hf(tmp_path, "o", other))).router_aux_loss_coef is None
    # the catalog's Mixtral-8x22B and Llama 4 state it (their config.json copies: 0.001)
    assert {load_model(n).router_aux_loss_coef for n in ("mixtral-8x22b", "llama4-scout", "llama4-maverick")} == {0.001}


def test_softmax_only_attn_type_list_is_priced(tmp_path: Path) -> None:
    # attn_type_list 1 marks softmax attention: a list without 0 declares no linear layer
    m = load_model(str(_hf(tmp_path, "m", {**_BASE, "attn_type_list": [1, 1, 1, 1]})))
    assert m.num_hidden_layers == 4 and m.num_sliding_layers == 0


_LLAMA4_TEXT = {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
                "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192,
                "intermediate_size_mlp": 16384, "vocab_size": 202048, "max_position_embeddings": 1048576,
                "num_experts_per_tok": 1, "attention_chunk_size": 8192}  # fmt: skip


@pytest.mark.parametrize(
    ("experts", "step", "total_b", "active_b", "moe_layers"),
    [(16, 1, 107.77, 17.17, 48), (128, 2, 400.71, 17.18, 24)],  # Scout, Maverick
)
def test_llama4_configs_price_their_own_layer_kinds(
    tmp_path: Path, experts: int, step: int, total_b: float, active_b: float, moe_layers: int
) -> None:
    # Meta: Scout 109B total with its vision encoder / 17B active, Maverick 400B / 17B; refused as
    # "interleaved MoE layers" before. Routed and shared experts 8192 wide, dense layers 16384,
    # layer i MoE when (i+1) % step == 0, every 4th layer NoPE and full, the rest chunked
    text = {**_LLAMA4_TEXT, "num_local_experts": experts, "interleave_moe_layer_step": step}
    m = load_model(str(_hf(tmp_path, "l4", {"model_type": "llama4", "vision_config": {}, "text_config": text})))
    counts = m.parameter_counts
    assert (round(counts.total / 1e9, 2), round(counts.active_per_token / 1e9, 2)) == (total_b, active_b)
    assert (m.num_moe_layers, m.is_moe_layer(0), m.is_moe_layer(step - 1)) == (moe_layers, step == 1, True)
    assert (m.intermediate_size, m.expert_intermediate_size, m.shared_expert_width) == (16384, 8192, 8192)
    assert m.num_chunked_layers == 36 and m.layer_types[3] == "full_attention" and m.attention_chunk_size == 8192
    assert counts.total == load_model("llama4-scout" if step == 1 else "llama4-maverick").parameter_counts.total


def test_llama4_layer_lists_the_planner_cannot_express_are_refused(tmp_path: Path) -> None:
    text = {**_LLAMA4_TEXT, "num_local_experts": 128, "interleave_moe_layer_step": 2, "moe_layers": [0, 2]}
    with pytest.raises(PlannerError, match=r"key 'moe_layers': the planner prices MoE on every"):
        load_model(str(_hf(tmp_path, "l4", text)))


@pytest.mark.parametrize("rope", [4, True, "0" * 48, [1] * 47, [1] * 60, [1, 0.5] * 24, ["no"] * 48])
def test_llama4_no_rope_layers_is_one_flag_per_layer(tmp_path: Path, rope: object) -> None:
    # an int had been a TypeError traceback, a 48-character string 48 chunked layers, a longer list
    # cut short and non-0/1 entries read by truthiness
    text = {**_LLAMA4_TEXT, "num_local_experts": 16, "no_rope_layers": rope}
    with pytest.raises(PlannerError, match=r"key 'no_rope_layers': expected a list of 0 or 1, one per layer \(48\)"):
        load_model(str(_hf(tmp_path, "l4", text)))
    flags = [int((i + 1) % 4 != 0) for i in range(48)]  # transformers' default: every 4th layer NoPE
    m = load_model(str(_hf(tmp_path, "ok", {**_LLAMA4_TEXT, "num_local_experts": 16, "no_rope_layers": flags})))
    assert m.num_chunked_layers == 36 and m.layer_types[3] == "full_attention"


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        ({"model_type": "modernbert"}, "a bidirectional encoder"),
        ({"model_type": "bert"}, "a bidirectional encoder"),
        ({"model_type": "t5"}, "a bidirectional encoder"),
        ({"model_type": "custom", "is_encoder_decoder": True}, "an encoder-decoder"),
    ],
)
def test_encoder_configs_are_refused_by_model_type(tmp_path: Path, config: dict, kind: str) -> None:
    # ModernBERT had been ranked as a causal decoder LM
    shape = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "vocab_size": 50368, "max_position_embeddings": 8192}  # fmt: skip
    with pytest.raises(PlannerError, match=f"is {kind}, which the planner does not model"):
        load_model(str(_hf(tmp_path, "enc", {**shape, **config})))


def test_gemmas_null_activation_is_transformers_default(tmp_path: Path) -> None:
    g = {"model_type": "gemma2", "num_hidden_layers": 42, "hidden_size": 3584, "num_attention_heads": 16,
         "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
         "max_position_embeddings": 8192, "hidden_activation": None}  # fmt: skip
    assert load_model(str(_hf(tmp_path, "g", g))).hidden_act == "gelu_pytorch_tanh"


def test_chunked_attention_in_training_and_serving() -> None:
    # training: a chunked layer runs one causal call per chunk, its keys the chunked mean (a quarter
    # of the causal layer's at four chunks), at a chunk-long call's rate; within one chunk it is the
    # causal layer; CP across chunks is refused by name. Serving: a 32K context keeps one chunk in
    # 36 of 48 layers under vLLM (ChunkedLocalAttentionSpec), all of it with full caches
    from planner import estimate
    from planner.cost.compute import attention_core_forward_s, flash_length_factor
    from planner.mesh import MeshArrays
    from planner.schemas import ParallelConfig
    from planner.search import default_job
    from planner.serving import serve

    scout, cluster = load_model("llama4-scout"), load_cluster("dgx-h100x16")
    causal = scout.model_copy(update={"layer_types": None})
    mesh = MeshArrays.from_configs([ParallelConfig(tp=8, dp=16, ep=16)])
    for seq, chunked_share in (
        (8192, 1.0),
        (32768, 0.25 * float(flash_length_factor(32768) / flash_length_factor(8192))),
    ):
        job = default_job(scout, seq_len=seq, global_batch_size=64)
        ratio = (
            attention_core_forward_s(scout, cluster, job, mesh)[0]
            / attention_core_forward_s(causal, cluster, job, mesh)[0]
        )
        assert ratio == pytest.approx((12 + 36 * chunked_share) / 48, rel=1e-3)
    with pytest.raises(PlannerError, match=r"cp 2 with llama4-scout's chunked attention over 32768 tokens"):
        estimate("llama4-scout", "dgx-h100x16", tp=2, pp=1, dp=32, cp=2, ep=16, seq_len=32768)
    from planner.serving.engine import load_engine
    from planner.serving.layout import Layouts
    from planner.serving.memory import plan_memory

    model, cluster, vllm = load_model("llama4-maverick"), load_cluster("dgx-h100x2"), load_engine("vllm")
    lay = Layouts.of(8, 2, 8)
    one_chunk = plan_memory(model, cluster, vllm, lay, "fp8", "bf16", 32000.0).sequence_kv_bytes[0]
    every_token = plan_memory(
        model, cluster, vllm.model_copy(update={"chunked_kv": "full"}), lay, "fp8", "bf16", 32000.0
    ).sequence_kv_bytes[0]
    assert one_chunk / every_token == pytest.approx((12 * 32000 + 36 * 8192) / (48 * 32000), rel=0.002)
    ranked = serve(
        "llama4-maverick", "dgx-h100x2", engine="vllm", input_len=30000, output_len=2000, weights_dtype="fp8"
    )
    assert ranked.candidates  # priced beyond one chunk, where it had been refused


def test_deepseek_style_moe_every_layer_is_not_refused(tmp_path: Path) -> None:
    # deepseek-ai/DeepSeek-V3's config.json says moe_layer_freq: 1 (every layer after the first
    # k dense ones), which ModelSpec expresses; only other frequencies are refused
    config = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
    }
    m = load_model(str(_hf(tmp_path, "DeepSeek-V3", config)))
    assert m.parameter_counts.total == pytest.approx(671e9, rel=0.005)  # the paper's 671 B (without MTP)
    assert (m.scoring_func, m.norm_topk_prob, m.routed_scaling_factor, m.router_expert_bias) == (
        "softmax",
        None,
        None,
        False,
    )
    router = {
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
    }
    m = load_model(str(_hf(tmp_path, "DeepSeek-V3-router", {**config, **router})))
    assert (m.scoring_func, m.norm_topk_prob, m.routed_scaling_factor, m.router_expert_bias) == (
        "sigmoid",
        True,
        2.5,
        True,
    )
    assert m.parameter_counts.total == pytest.approx(671e9, rel=0.005)  # the router changes no weight count
    stated_null = {**config, "scoring_func": None, "routed_scaling_factor": None, "norm_topk_prob": None}
    assert load_model(str(_hf(tmp_path, "DeepSeek-V3-null", stated_null))).scoring_func == "softmax"
    with pytest.raises(PlannerError, match="key 'moe_layer_freq'"):
        load_model(str(_hf(tmp_path, "every-other", {**config, "moe_layer_freq": 2})))


def test_falcon_configs_take_their_class_defaults() -> None:
    """Falcon's RW-format config (tiiuae/falcon-7b's first release: model_type RefinedWebModel,
    n_layer, n_head, multi_query) and the new-architecture one (Falcon-40B: num_kv_heads): a plain
    4h GELU MLP, LayerNorm without biases, rotary positions, tied embeddings, one KV head under
    multi_query (transformers FalconConfig / modeling_falcon.py)."""
    from planner.hf_config import model_from_hf_config

    rw = {"model_type": "RefinedWebModel", "hidden_size": 4544, "n_head": 71, "n_layer": 32, "multi_query": True,
          "parallel_attn": True, "bias": False, "vocab_size": 65024}  # fmt: skip
    m = model_from_hf_config(rw, "falcon-7b", "test")
    assert (m.num_kv_heads, m.intermediate_size, m.is_gated_mlp, m.norm_type) == (1, 4 * 4544, False, "layernorm")
    assert m.tie_word_embeddings and not (m.attention_bias or m.mlp_bias) and m.position_embedding_type == "rope"
    h, layers = 4544, 32
    per_layer = h * (71 + 2) * 64 + h * h + 2 * h * 4 * h + 2 * 2 * h  # QKV (MQA), out, MLP, two LayerNorms
    assert m.parameter_counts.total == 65024 * h + layers * per_layer + 2 * h  # the "7B" Falcon (6.92 B)
    new = {"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
           "num_kv_heads": 8, "new_decoder_architecture": True, "bias": False, "vocab_size": 65024}  # fmt: skip
    assert model_from_hf_config(new, "falcon-40b", "test").num_kv_heads == 8


# ---- the cache of parsed catalog files ------------------------------------------------------------
@pytest.fixture
def shipped_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A catalog 'models' folder of our own (shipped as far as read_yaml can tell), and a cache
    folder under tmp_path."""
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setattr("planner.catalog.catalog_dir", lambda kind: folder if kind == "models" else tmp_path / kind)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return folder


def test_catalog_cache_is_parsed_again_when_the_yaml_changes(shipped_models: Path) -> None:
    from planner.catalog import read_yaml

    path = shipped_models / "m.yaml"
    path.write_text("name: m\nhidden_size: 1024\n")
    assert read_yaml(path) == {"name": "m", "hidden_size": 1024}
    cache = shipped_models.parent / "cache" / "planner" / "catalog" / "models" / "m.json"
    assert json.loads(cache.read_text())["data"] == {"name": "m", "hidden_size": 1024}
    path.write_text("name: m\nhidden_size: 2048\n")  # same size, maybe the same mtime: the text decides
    assert read_yaml(path) == {"name": "m", "hidden_size": 2048}
    assert json.loads(cache.read_text())["data"] == {"name": "m", "hidden_size": 2048}


def test_catalog_cache_is_read_without_parsing(shipped_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.catalog import read_yaml

    path = shipped_models / "m.yaml"
    path.write_text("name: m\n")
    first = read_yaml(path)

    def no_parsing(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(yaml, "load", no_parsing)
    again = read_yaml(path)
    assert again == first and again is not first


def test_catalog_cache_keeps_only_what_json_gives_back(shipped_models: Path) -> None:
    from planner.catalog import read_yaml

    path = shipped_models / "d.yaml"
    path.write_text("released: 2024-07-23\n1: one\n")
    assert read_yaml(path) == {"released": datetime.date(2024, 7, 23), 1: "one"}
    assert not (shipped_models.parent / "cache" / "planner" / "catalog" / "models" / "d.json").exists()
    assert read_yaml(path)["released"] == datetime.date(2024, 7, 23)


def test_catalog_cache_unwritable_or_corrupt(
    shipped_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planner.catalog import read_yaml

    path = shipped_models / "m.yaml"
    path.write_text("name: m\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache folder cannot be made
    assert read_yaml(path) == {"name": "m"}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "planner" / "catalog" / "models" / "m.json"
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    assert read_yaml(path) == {"name": "m"}
    assert json.loads(cache.read_text())["data"] == {"name": "m"}


def test_only_shipped_catalog_files_are_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.catalog import read_yaml

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    mine = tmp_path / "models" / "mine.yaml"  # a folder named like a catalog's, not the shipped one
    mine.parent.mkdir()
    mine.write_text("name: mine\n")
    assert read_yaml(mine) == {"name": "mine"}
    assert not (tmp_path / "cache").exists()
    shipped = catalog_dir("stacks") / "megatron-core.yaml"
    assert read_yaml(shipped) == yaml.safe_load(shipped.read_text())
    assert (tmp_path / "cache" / "planner" / "catalog" / "stacks" / "megatron-core.json").is_file()


@pytest.mark.parametrize(
    "damage",
    [
        lambda cache: cache.write_text("[" * 100_000 + "]" * 100_000),  # past the JSON parser's recursion
        lambda cache: cache.write_text(
            json.dumps({**json.loads(cache.read_text()), "data": {"name": "m", "hidden_size": "abc"}})
        ),  # the same text, other data: served, it blamed the YAML for a value it does not hold
        lambda cache: (cache.unlink(), os.mkfifo(cache)),  # a pipe: reading it blocked every command
    ],
)
def test_a_damaged_cache_entry_is_parsed_again(shipped_models: Path, damage) -> None:
    from planner.catalog import read_yaml

    path = shipped_models / "m.yaml"
    path.write_text("name: m\nhidden_size: 1024\n")
    read_yaml(path)
    cache = shipped_models.parent / "cache" / "planner" / "catalog" / "models" / "m.json"
    damage(cache)
    assert read_yaml(path) == {"name": "m", "hidden_size": 1024}
    assert json.loads(cache.read_text())["data"] == {"name": "m", "hidden_size": 1024}  # written over


def test_a_relative_cache_home_or_a_missing_home_keeps_no_cache(
    shipped_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The XDG base directory spec ignores a relative XDG_CACHE_HOME (it made a cache under the
    current folder); with no home folder either, nothing is cached (HOME=/nonexistent/x made one
    at the root)."""
    from planner.catalog import read_yaml

    path = shipped_models / "m.yaml"
    path.write_text("name: m\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path / "no-such-home"))
    assert read_yaml(path) == {"name": "m"}
    assert not (tmp_path / "relative").exists() and not (tmp_path / "no-such-home").exists()


def test_a_model_or_stack_file_edited_in_the_same_process_is_read_again(tmp_path: Path) -> None:
    # the loaders had cached by path alone: a notebook's edited layer count, and a misspelt key, went unseen
    from planner.catalog import load_stack
    from planner.errors import PlannerError

    spec = yaml.safe_load((catalog_dir("models") / "llama3-8b.yaml").read_text())
    path = tmp_path / "edit.yaml"
    path.write_text(yaml.safe_dump({**spec, "num_hidden_layers": 32}))
    assert load_model(str(path)).num_hidden_layers == 32
    path.write_text(yaml.safe_dump({**spec, "num_hidden_layers": 16}))
    os.utime(path, ns=(1, 1))  # a new stamp even where the clock's resolution would not give one
    assert load_model(str(path)).num_hidden_layers == 16
    path.write_text(yaml.safe_dump({**spec, "num_hiden_layers": 3}))
    with pytest.raises(PlannerError, match="num_hiden_layers"):
        load_model(str(path))
    stack = yaml.safe_load((catalog_dir("stacks") / "torchtitan.yaml").read_text())
    stack_path = tmp_path / "st.yaml"
    stack_path.write_text(yaml.safe_dump({**stack, "name": "mine"}))
    assert load_stack(str(stack_path)).name == "mine"
    stack_path.write_text(yaml.safe_dump({**stack, "name": "mine2"}))
    os.utime(stack_path, ns=(2, 2))
    assert load_stack(str(stack_path)).name == "mine2"

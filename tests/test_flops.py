"""FLOP counts: the general count must reproduce Megatron-LM's closed form for GPT."""

from __future__ import annotations

import pytest

from planner.catalog import load_model
from planner.cost.flops import megatron_gpt_flops_per_step, model_flops_per_token, recompute_flops_per_token


@pytest.mark.parametrize("name", ["gpt-1.7b", "gpt-145.6b", "gpt-1t", "gpt3-175b"])
def test_general_count_reproduces_megatron_formula(name: str) -> None:
    # Narayanan et al. 2021, eq. 3: 72 B s L h^2 (1 + s/6h + V/12hL); 96 and V/16hL with full
    # recompute. Exact for Megatron GPT (12h^2 matmul parameters per layer).
    m = load_model(name)
    B, s = 512, 2048
    ref = megatron_gpt_flops_per_step(B, s, m.num_hidden_layers, m.hidden_size, m.vocab_size, full_recompute=False)
    assert model_flops_per_token(m, s) * B * s == pytest.approx(ref, rel=1e-12)
    ref_full = megatron_gpt_flops_per_step(B, s, m.num_hidden_layers, m.hidden_size, m.vocab_size, full_recompute=True)
    hw = (model_flops_per_token(m, s) + recompute_flops_per_token(m, s, "full")) * B * s
    assert hw == pytest.approx(ref_full, rel=1e-12)


def test_llama3_70b_flops_per_token_is_6n_plus_attention() -> None:
    m = load_model("llama3-70b")
    s = 8192
    n_matmul = (
        m.parameter_counts.total
        - m.parameter_counts.embedding
        - m.num_hidden_layers * m.parameter_counts.norms_per_layer
        - m.parameter_counts.final_norm
    )
    attention = 12 * m.num_hidden_layers * s * m.hidden_size  # 12 L s h for d_h * a = h
    assert model_flops_per_token(m, s) == pytest.approx(6 * n_matmul + attention, rel=1e-12)
    # About 4.2e11 + 6.4e10: the known ~ 6 x 70e9 plus the attention term at 8K.
    assert model_flops_per_token(m, s) == pytest.approx(4.86e11, rel=0.01)


def test_causal_count_is_megatron_lm_s_num_floating_point_operations() -> None:
    # megatron-core 0.17 training.py, GQA branch, per token: 3 (fwd + bwd) x 2 (FMA) x [h (q + 2 kv)
    # + q s / 2 x 2 (causal mask) + q h + 3 h f (SwiGLU)] per layer, plus 3 x 2 x h V for the logits
    m = load_model("llama3-70b")
    s, h, f, L, V = 8192, m.hidden_size, m.intermediate_size, m.num_hidden_layers, m.vocab_size
    d = h // m.num_attention_heads
    q, kv = m.num_attention_heads * d, m.num_key_value_heads * d
    megatron = 6 * L * (h * (q + 2 * kv) + q * s / 2 * 2 + q * h + 3 * h * f) + 6 * h * V
    assert model_flops_per_token(m, s, causal=True) == pytest.approx(megatron, rel=1e-12)
    assert model_flops_per_token(m, s, causal=True) == pytest.approx(449.2e9, rel=1e-3)
    # the causal count differs by half the attention squares: 6 L q s
    assert model_flops_per_token(m, s) - model_flops_per_token(m, s, causal=True) == pytest.approx(6 * L * q * s)
    # recompute's attention counts alike: the full recompute of the causal count's forward
    extra = recompute_flops_per_token(m, s, "full", causal=True)
    assert extra == pytest.approx(recompute_flops_per_token(m, s, "full") - 2 * L * q * s)


def test_moe_flops_count_only_active_experts() -> None:
    m = load_model("mixtral-8x7b")
    s = 4096
    dense_equivalent = 6 * m.parameter_counts.active_per_token
    # Active params include the embedding (no FLOPs) but not the attention scores: within 10%.
    assert model_flops_per_token(m, s) == pytest.approx(dense_equivalent, rel=0.1)
    assert model_flops_per_token(m, s) < 6 * m.parameter_counts.total / 3


def test_selective_recompute_adds_only_the_attention_core() -> None:
    m = load_model("gpt-22b")
    s = 2048
    extra = recompute_flops_per_token(m, s, "selective")
    assert extra == pytest.approx(4 * m.num_hidden_layers * s * m.hidden_size)
    assert recompute_flops_per_token(m, s, "none") == 0


def test_sliding_window_attention_counts_the_keys_a_query_can_see() -> None:
    from planner.cost.flops import attended_keys, attention_score_flops_per_token_fwd

    # causal mean over s queries: (s+1)/2; a window w <= s: w - w(w-1)/(2s)
    assert attended_keys(8192, None) == pytest.approx(4096.5)
    assert attended_keys(8192, 8192) == pytest.approx(4096.5)
    assert attended_keys(8192, 4096) == pytest.approx(4096 - 4096 * 4095 / 16384)
    assert attended_keys(8192, 128) == pytest.approx(128 - 128 * 127 / 16384)
    mistral = load_model("mistral-7b")
    full = mistral.model_copy(update={"sliding_window": None})
    ratio = attention_score_flops_per_token_fwd(mistral, 8192) / attention_score_flops_per_token_fwd(full, 8192)
    assert ratio == pytest.approx(2 * attended_keys(8192, 4096) / 8192)
    # GPT-OSS alternates: half the layers slide over 128 keys
    alternating = full.model_copy(
        update={"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 16}
    )
    assert alternating.num_sliding_layers == 16
    half = attention_score_flops_per_token_fwd(alternating, 8192) / attention_score_flops_per_token_fwd(full, 8192)
    assert half == pytest.approx(0.5 + 0.5 * 2 * attended_keys(8192, 128) / 8192)
    assert model_flops_per_token(alternating, 8192) < model_flops_per_token(full, 8192)


def test_layer_types_must_match_the_layers_and_name_a_window() -> None:
    from planner.schemas import ModelSpec

    base = load_model("mistral-7b").model_dump()
    with pytest.raises(ValueError, match="layer_types lists 2 layers"):
        ModelSpec(**{**base, "layer_types": ["sliding_attention", "full_attention"]})
    with pytest.raises(ValueError, match="sliding_window is not set"):
        ModelSpec(**{**base, "sliding_window": None, "layer_types": ["sliding_attention"] * 32})


@pytest.mark.parametrize(
    ("stack", "trained"), [("megatron-core", 1), ("torchtitan", 0), ("deepspeed", 0), ("llm-foundry", 0)]
)
def test_a_model_trains_its_mtp_depth_only_on_a_stack_that_builds_mtp(stack: str, trained: int) -> None:
    """DeepSeek-V3's one MTP module: Megatron-Core builds it (--mtp-num-layers); torchtitan's and
    Hugging Face's DeepSeek-V3 have none, so a plan there had priced a layer they never run."""
    from planner.cost.flops import mtp_layers
    from planner.schemas.job import JobSpec

    model = load_model("deepseek-v3")
    assert model.num_nextn_predict_layers == 1
    assert mtp_layers(model, JobSpec(global_batch_size=64, seq_len=4096, stack=stack)) == trained
    assert mtp_layers(model, JobSpec(global_batch_size=64, seq_len=4096, mtp_layers=0)) == 0

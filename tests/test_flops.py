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

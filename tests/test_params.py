"""Parameter counts against published totals (tolerance 2%, as the catalog issue asks)."""

from __future__ import annotations

import pytest

from planner.catalog import load_model

PUBLISHED = [
    # (model, total, active or None, source)
    ("llama3-70b", 70.6e9, None, "Llama 3 Herd of Models, arXiv:2407.21783, Table 3"),
    ("llama3-405b", 405.9e9, None, "Llama 3 Herd of Models, arXiv:2407.21783 (405B: 405.9e9 in the model card)"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, "Mixtral of Experts, arXiv:2401.04088, section 2"),
    ("deepseek-v3", 671e9, 37e9, "DeepSeek-V3 Technical Report, arXiv:2412.19437, abstract"),
    ("gpt3-175b", 175e9, None, "Brown et al. 2020, Table 2.1"),
    ("llama2-7b", 6.738e9, None, "HF model card (6,738,415,616)"),
    ("llama3-8b", 8.03e9, None, "HF model card"),
    ("mixtral-8x22b", 141e9, 39e9, "Mistral AI, Mixtral 8x22B announcement"),
    ("qwen3-235b-a22b", 235e9, 22e9, "Qwen3 Technical Report, arXiv:2505.09388, Table 2"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, "Qwen3 Technical Report, arXiv:2505.09388, Table 2"),
    ("bloom-176b", 176.2e9, None, "BLOOM, arXiv:2211.05100"),
    ("gpt2-124m", 124.44e6, None, "HF gpt2 (124,439,808)"),
]


@pytest.mark.parametrize(("name", "total", "active", "source"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_parameter_counts(name: str, total: float, active: float | None, source: str) -> None:
    counts = load_model(name).parameter_counts
    assert counts.total == pytest.approx(total, rel=0.02), source
    if active is not None:
        assert counts.active_per_token == pytest.approx(active, rel=0.02), source


@pytest.mark.parametrize(
    ("name", "total", "active"), [("gpt-oss-120b", 116.83e9, 5.13e9), ("gpt-oss-20b", 20.91e9, 3.61e9)]
)
def test_gpt_oss_counts_match_its_model_card(name: str, total: float, active: float) -> None:
    # OpenAI's gpt-oss model card (August 2025) counts active parameters without the embedding;
    # biases on attention and experts and one sink logit per head are in both counts
    counts = load_model(name).parameter_counts
    assert counts.total == pytest.approx(total, rel=5e-4)
    assert counts.active_per_token - counts.embedding == pytest.approx(active, rel=5e-3)


def test_exact_counts_for_configs_with_published_integers() -> None:
    # Exact parameter counts of the released checkpoints (HF safetensors metadata).
    assert load_model("llama2-7b").parameter_counts.total == 6_738_415_616
    assert load_model("llama3-8b").parameter_counts.total == 8_030_261_248
    assert load_model("gpt2-124m").parameter_counts.total == 124_439_808


def test_megatron_table_sizes_follow_the_paper_formula() -> None:
    # Narayanan et al. 2021 count 12lh^2 (1 + 13/(12h) + (V+s)/(12lh)); our architecture count
    # must equal it for the Megatron GPT cards, plus the final LayerNorm (2h) the formula omits.
    for name in ("gpt-1.7b", "gpt-39.1b", "gpt-1t"):
        m = load_model(name)
        L, h, V, s = m.num_hidden_layers, m.hidden_size, m.vocab_size, m.max_position_embeddings
        formula = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))
        assert m.parameter_counts.total == pytest.approx(formula + 2 * h, rel=1e-12)


def test_dense_model_active_equals_total_and_breakdown_adds_up() -> None:
    m = load_model("llama3-70b")
    c = m.parameter_counts
    assert c.active_per_token == c.total
    assert c.total == m.num_hidden_layers * c.dense_layer + c.embedding + c.lm_head + c.final_norm
    # Llama 3 70B: 8192 x 128256 embedding, untied head of the same size.
    assert c.embedding == c.lm_head == 8192 * 128256
    assert not m.is_moe and m.is_gated_mlp


def test_moe_layer_layout() -> None:
    ds = load_model("deepseek-v3")
    assert ds.num_moe_layers == 58 and ds.num_dense_layers == 3
    assert not ds.is_moe_layer(2) and ds.is_moe_layer(3)
    mix = load_model("mixtral-8x7b")
    assert mix.num_moe_layers == 32
    # Mixtral: 8 experts of 3 * 4096 * 14336 each.
    assert mix.parameter_counts.moe_expert_each == 3 * 4096 * 14336
    assert mix.parameter_counts.moe_experts_per_layer == 8 * 3 * 4096 * 14336


def test_moe_layer_count_in_closed_form_matches_the_layer_rule() -> None:
    """``num_moe_layers`` counts without a loop over the layers (a million-layer config took seconds
    per use); it must agree with ``is_moe_layer`` for every dense prefix and step."""
    import itertools

    base = load_model("qwen3-30b-a3b")
    for layers, dense, step in itertools.product([1, 2, 5, 36, 61, 94], [None, 0, 1, 3, 7, 100], [None, 1, 2, 3, 4]):
        m = base.model_copy(
            update={"num_hidden_layers": layers, "first_k_dense_replace": dense, "decoder_sparse_step": step}
        )
        assert m.num_moe_layers == sum(m.is_moe_layer(i) for i in range(layers)), (layers, dense, step)
    assert load_model("deepseek-v3").num_moe_layers == 58 and load_model("llama3-8b").num_moe_layers == 0


def test_a_model_copied_with_a_new_shape_counts_its_own_parameters() -> None:
    """``parameter_counts`` is cached in the instance, which pydantic's model_copy copied whole:
    a copy with a new shape kept the original's count (``Frozen.model_copy`` drops the cache where
    an update is given; the size check at validation does not fill it either)."""
    base = load_model("llama3-8b")
    assert base.parameter_counts.total == 8_030_261_248  # cached on the original
    bigger = base.model_copy(update={"vocab_size": 1_024_000})
    assert bigger.parameter_counts.total - base.parameter_counts.total == 2 * (1_024_000 - 128_256) * 4096

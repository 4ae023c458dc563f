"""One transformer layer's shard, forward and backward, on one rank (torch).

The shard is what one rank of the plan computes for one micro-batch of one layer, with the
weight shapes of ``planner.cost.compute.layer_gemms`` (the shapes the step price uses): the
pre-norm, QKV (or MLA's low-rank projections), RoPE, causal attention through
``torch.nn.functional.scaled_dot_product_attention`` (``ATTENTION_KERNELS``: a fused kernel on
GPU when the job uses flash attention, and an error rather than a silent fallback to the unfused
one; the unfused math kernel when it does not), the output projection and residual add, the second
norm and the MLP (SwiGLU when gated, GELU otherwise), or for a MoE layer the router, the local
experts on even shares of the routed tokens, one after another (``shard.predict_layer_s`` prices
them so, not on the stack's concurrent streams), and the shared experts. Backward is
``torch.autograd.grad`` of the output against a fixed random output gradient, for the input and
every weight. Full recompute runs the forward once more without
autograd first; selective recompute follows the stack's policy (``Stack.selective_recompute``):
Megatron's checkpoints the attention core, so backward runs it again; torchtitan's per-op SAC
wraps the layer in ``create_selective_checkpoint_contexts`` with torchtitan's policy (save the
attention output and every other matmul's, recompute the rest), so backward runs every second
matmul whose output it needs and the element-wise ops again. The shard fuses QKV and gate/up
into one matmul each, so its alternation recomputes the attention output projection only, where
torchtitan's unfused linears (and the price, ``compute.selective_recompute_forward_s``) average
half of the matmuls backward needs: a known gap of the replay, not of the price.

The other ranks are stood in for, never called: their collectives are timed as their own terms.
With sequence parallelism the residual stream holds tokens/t rows; a local ``repeat`` stands for
the all-gather before each block and a slice for the reduce-scatter after it. With context
parallelism a rank's s/c queries meet its share of the causal keys, s/2 on average over the
load-balanced chunks (Megatron-Core's CP), replayed as a non-causal product against s/2 keys (the
local K and V repeated: what the ring would bring). A MoE layer's dispatch is a repeat of the
local tokens (top-k x expert-TP copies) and its combine a sum, standing for the permutation and
the all-to-alls; where an expert-parallel rank holds several experts the routed rows go through a
fixed permutation and back (the sort into expert order, ``compute.token_reorders``), and where
the stack runs them outside its fused kernels the SwiGLU clamp and the experts' output bias
(``compute.expert_epilogue_bytes``) run as Megatron-Core writes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (the usual spelling)
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from planner.cost.compute import Gemm, expert_epilogue_bytes, layer_gemms, token_reorders
from planner.cost.flops import attention_dims, flash_attention_runs
from planner.cost.memory import kv_heads_per_rank
from planner.mesh import MeshArrays
from planner.validate.ops import GEMM_DTYPES
from planner.validate.schemas import LayerShard, TermSpec

Tensor = torch.Tensor

FUSED_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
"""The fused kernels torch may pick for a flash-attention job on GPU (FlashAttention-2, cuDNN's, or
the memory-efficient one for MLA's unequal head dims). These are torch's kernels, not Transformer
Engine's or FlashAttention-3: an attention efficiency calibrated from them describes PyTorch SDPA."""


DROPOUT_P = 0.1
"""Dropout rate of a job with dropout: Megatron-LM's defaults --attention-dropout and
--hidden-dropout 0.1 (megatron/training/arguments.py); the rate does not change the work."""

ROPE_BASE = 10000.0
"""RoPE frequency base (Su et al. 2021, 'RoFormer', section 3.2.2); models that use another base
(Llama 3: 500000) run the same element-wise work, so the timing does not depend on it."""


def attention_kernels(flash: bool, device: torch.device) -> list[SDPBackend]:
    """SDPA backends allowed for the shard: unfused (math) without flash attention; fused only on
    GPU with it; on CPU with it, torch's CPU flash kernel or math where that kernel refuses."""
    if not flash:
        return [SDPBackend.MATH]
    return FUSED_ATTENTION if device.type == "cuda" else [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def _whole(x: np.ndarray | float) -> int:
    """A one-row column (or scalar) of ``layer_gemms`` as a whole number of at least 1."""
    return max(round(float(np.asarray(x).reshape(-1)[0])), 1)


class Shard:
    """Weights and inputs of one layer shard, and its forward (a plain function of tensors)."""

    def __init__(self, shard: LayerShard, device: torch.device, dtype: torch.dtype, seed: int = 0) -> None:
        self.spec, self.device, self.dtype = shard, device, dtype
        model, job, plan = shard.model, shard.job, shard.plan
        mesh = MeshArrays.from_configs([plan])
        self.gemms: dict[str, Gemm] = {g.name: g for g in layer_gemms(model, job, mesh, shard.moe)}
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.kernels = attention_kernels(flash_attention_runs(model, job), device)
        self.t = plan.tp
        self.b = plan.micro_batch_size
        self.s = job.seq_len // plan.cp
        self.tokens = self.b * self.s
        self.resid_rows = self.tokens // self.t if plan.sequence_parallel and self.t > 1 else self.tokens
        h = model.hidden_size
        self.h = h
        self.heads = max(model.num_attention_heads // self.t, 1)
        self.kv_heads = (
            self.heads if model.is_mla else round(float(kv_heads_per_rank(model, np.asarray(float(self.t)))))
        )
        self.d_qk, self.d_v = attention_dims(model)
        self.weights: dict[str, Tensor] = {
            name: self._matrix(g) for name, g in self.gemms.items() if not name.startswith("moe.expert")
        }
        if shard.moe:
            local = _whole(self.gemms["moe.expert_in"].count)
            for name in ("moe.expert_in", "moe.expert_out"):
                for e in range(local):
                    self.weights[f"{name}.{e}"] = self._matrix(self.gemms[name])
            self.local_experts = local
            self.routed_rows = _whole(self.gemms["moe.expert_in"].m_rows)
            rows = local * self.routed_rows
            # the tokens an all-to-all brings, sorted into expert order and back (priced by
            # compute.token_reorders): a fixed permutation of the routed rows and its inverse
            self.expert_order: Tensor | None = None
            if token_reorders(model, mesh)[0] > 1:
                self.expert_order = torch.randperm(rows, generator=self.generator, device=device)
                self.expert_restore = torch.argsort(self.expert_order)
            # what the stack runs outside its fused kernels (compute.expert_epilogue_bytes): the
            # SwiGLU clamp before the activation, the experts' output bias after the second GEMM
            epilogue = expert_epilogue_bytes(model, job)
            self.clamp = model.swiglu_limit if epilogue["clamp"] else None
            self.routed_probs: Tensor | None = None
            if epilogue["bias"]:
                for e in range(local):
                    self.weights[f"moe.expert_out.{e}.bias_after"] = self._vector(h, 0.0)
                self.routed_probs = self._random((rows, 1), 1.0).abs()
        norm_bias = model.norm_type == "layernorm"
        for name in ("norm1", "norm2"):
            self.weights[f"{name}.weight"] = self._vector(h, 1.0)
            if norm_bias:
                self.weights[f"{name}.bias"] = self._vector(h, 0.0)
        if model.attention_bias and not model.is_mla:
            self.weights["attn.qkv.bias"] = self._vector(_whole(self.gemms["attn.qkv"].n), 0.0)
            self.weights["attn.out.bias"] = self._vector(h, 0.0)
        if model.mlp_bias and not shard.moe:
            self.weights["mlp.in.bias"] = self._vector(_whole(self.gemms["mlp.in"].n), 0.0)
            self.weights["mlp.out.bias"] = self._vector(h, 0.0)
        if model.qk_norm and not model.is_mla:
            self.weights["q_norm.weight"] = self._vector(self.d_qk, 1.0)
            self.weights["k_norm.weight"] = self._vector(self.d_qk, 1.0)
        if model.is_mla:
            if model.q_lora_rank:
                self.weights["q_a_norm.weight"] = self._vector(model.q_lora_rank, 1.0)
            self.weights["kv_a_norm.weight"] = self._vector(model.kv_lora_rank or 0, 1.0)
        self.x = self._random((self.resid_rows, h), 1.0).requires_grad_()
        self.grad_out = self._random((self.resid_rows, h), 1.0)
        rope_dim = (model.qk_rope_head_dim or self.d_qk) if model.is_mla else self.d_qk
        self.rope = self._rope_tables(rope_dim) if model.position_embedding_type == "rope" else None

    # ---- parameters ------------------------------------------------------------------------
    def _random(self, shape: tuple[int, ...], std: float) -> Tensor:
        """Normal values drawn on the device (a llama3-70b shard is ~1e9 of them)."""
        return torch.randn(shape, generator=self.generator, device=self.device, dtype=self.dtype) * std

    def _matrix(self, gemm: Gemm) -> Tensor:
        """A (K x N) weight with standard deviation 1/sqrt(K), so activations stay of order 1 (the
        values do not change the timing; overflowing ones could, through NaN paths)."""
        k, n = _whole(gemm.k), _whole(gemm.n)
        return self._random((k, n), 1.0 / math.sqrt(k)).requires_grad_()

    def _vector(self, size: int, value: float) -> Tensor:
        return torch.full((size,), value, dtype=self.dtype, device=self.device).requires_grad_()

    def _rope_tables(self, dim: int) -> tuple[Tensor, Tensor]:
        half = dim // 2
        inverse = 1.0 / (ROPE_BASE ** (torch.arange(half, dtype=torch.float32) / half))
        angles = torch.outer(torch.arange(self.s, dtype=torch.float32), inverse)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(self.device, self.dtype), angles.sin().to(self.device, self.dtype)

    # ---- pieces of the forward -----------------------------------------------------------------
    def _norm(self, x: Tensor, name: str) -> Tensor:
        w = self.weights[f"{name}.weight"]
        if f"{name}.bias" in self.weights:
            return F.layer_norm(x, (x.shape[-1],), w, self.weights[f"{name}.bias"])
        return F.rms_norm(x, (x.shape[-1],), w)

    def _linear(self, x: Tensor, name: str) -> Tensor:
        y = x @ self.weights[name]
        bias = self.weights.get(f"{name}.bias")
        return y if bias is None else y + bias

    def _gathered(self, x: Tensor) -> Tensor:
        """The block's input over all of the rank's tokens: SP's all-gather, stood in for by a repeat."""
        return x.repeat(self.tokens // x.shape[0], 1) if x.shape[0] != self.tokens else x

    def _scattered(self, y: Tensor) -> Tensor:
        """The block's output on the residual's rows: SP's reduce-scatter, stood in for by a slice."""
        return y[: self.resid_rows] if y.shape[0] != self.resid_rows else y

    def _apply_rope(self, x: Tensor) -> Tensor:
        assert self.rope is not None
        cos, sin = self.rope
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def _heads(self, x: Tensor, heads: int, dim: int) -> Tensor:
        return x.reshape(self.b, self.s, heads, dim).transpose(1, 2)

    def _qkv(self, normed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values as (b, heads, s, d) from the normed block input on the residual's
        rows (``normed``), gathered where its projections take the whole sequence."""
        model = self.spec.model
        if model.is_mla:
            if self.spec.job.software.tp_module_plan == "megatron-core":
                return self._mla_qkv(normed, self._gathered)  # down-projections on the rank's shard
            return self._mla_qkv(self._gathered(normed), lambda t: t)
        y = self._gathered(normed)
        qkv = self._linear(y, "attn.qkv")
        q, k, v = qkv.split([self.heads * self.d_qk, self.kv_heads * self.d_qk, self.kv_heads * self.d_v], dim=-1)
        q, k = self._heads(q, self.heads, self.d_qk), self._heads(k, self.kv_heads, self.d_qk)
        v = self._heads(v, self.kv_heads, self.d_v)
        if model.qk_norm:
            q = F.rms_norm(q, (self.d_qk,), self.weights["q_norm.weight"])
            k = F.rms_norm(k, (self.d_qk,), self.weights["k_norm.weight"])
        if self.rope is not None:
            q, k = self._apply_rope(q), self._apply_rope(k)
        return q, k, v

    def _mla_qkv(self, y: Tensor, gather: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """DeepSeek MLA: low-rank q (q_a, norm, q_b) and kv (kv_a, norm, kv_b); the rope part of the
        key is shared by the heads. The down-projections run on ``y`` and ``gather`` brings their
        outputs to the whole sequence (Megatron-Core's duplicated q_a/kv_a on the sequence shard,
        ``compute.mla_down_tokens``), or ``y`` is gathered already (torchtitan)."""
        model = self.spec.model
        d_rope = model.qk_rope_head_dim or 0
        d_nope = self.d_qk - d_rope
        if "attn.q_a" in self.weights:
            q = self._linear(self._norm(gather(self._linear(y, "attn.q_a")), "q_a_norm"), "attn.q_b")
        else:
            q = self._linear(gather(y), "attn.q")
        q = self._heads(q, self.heads, self.d_qk)
        latent, k_rope = gather(self._linear(y, "attn.kv_a")).split([model.kv_lora_rank or 0, d_rope], dim=-1)
        kv = self._linear(self._norm(latent, "kv_a_norm"), "attn.kv_b")
        k_nope, v = self._heads(kv, self.heads, d_nope + self.d_v).split([d_nope, self.d_v], dim=-1)
        k_rope = self._heads(k_rope, 1, d_rope)
        if self.rope is not None:
            q = torch.cat([q[..., :d_nope], self._apply_rope(q[..., d_nope:])], dim=-1)
            k_rope = self._apply_rope(k_rope)
        k = torch.cat([k_nope, k_rope.expand(-1, self.heads, -1, -1)], dim=-1)
        return q, k, v

    def _core(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Causal attention of the rank's queries (module docstring for CP)."""
        job = self.spec.job
        dropout = DROPOUT_P if job.dropout else 0.0
        gqa = q.shape[1] != k.shape[1]
        causal = self.spec.plan.cp == 1
        if not causal:
            keys = job.seq_len // 2
            reps = -(-keys // self.s)
            k, v = k.repeat(1, 1, reps, 1)[:, :, :keys], v.repeat(1, 1, reps, 1)[:, :, :keys]
        with sdpa_kernel(self.kernels):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=causal, enable_gqa=gqa)

    def _attention(self, x: Tensor) -> Tensor:
        q, k, v = self._qkv(self._norm(x, "norm1"))
        if self.spec.plan.recompute == "selective" and not self._op_sac:
            core = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            core = self._core(q, k, v)
        out = self._linear(core.transpose(1, 2).reshape(self.tokens, self.heads * self.d_v), "attn.out")
        return self._dropout(self._scattered(out))

    def _mlp(self, y: Tensor, up: str, down: str, clamp: float | None = None) -> Tensor:
        """SwiGLU (gated: the up-projection holds gate and up halves) or GELU between two GEMMs;
        ``clamp`` clamps gate and up first, outside the activation, as Megatron-Core does."""
        z = self._linear(y, up)
        if self.spec.model.is_gated_mlp:
            gate, value = z.chunk(2, dim=-1)
            if clamp is not None:
                z = torch.cat((gate.clamp(max=clamp), value.clamp(min=-clamp, max=clamp)), dim=-1)
                gate, value = z.chunk(2, dim=-1)
            z = F.silu(gate) * value
        else:
            z = F.gelu(z, approximate="tanh")
        return self._linear(z, down)

    def _moe(self, y: Tensor) -> Tensor:
        """Router on the rank's 1/t of the tokens, local experts on even shares of the routed rows,
        shared experts on all of them (``layer_gemms``)."""
        model = self.spec.model
        local_tokens = y[: max(self.tokens // self.t, 1)]
        probs = torch.softmax(local_tokens @ self.weights["moe.router"], dim=-1)
        weights, _ = torch.topk(probs, model.num_experts_per_tok or 1, dim=-1)
        rows = self.local_experts * self.routed_rows
        copies = -(-rows // local_tokens.shape[0])
        routed = local_tokens.repeat(copies, 1)[:rows]
        if self.expert_order is not None:
            routed = routed.index_select(0, self.expert_order)
        spans = [slice(e * self.routed_rows, (e + 1) * self.routed_rows) for e in range(self.local_experts)]
        outputs = [
            self._mlp(routed[span], f"moe.expert_in.{e}", f"moe.expert_out.{e}", self.clamp)
            for e, span in enumerate(spans)
        ]
        if (probs := self.routed_probs) is not None:  # TEGroupedMLP._apply_bias: per expert, t + b * p
            outputs = [
                out + self.weights[f"moe.expert_out.{e}.bias_after"] * probs[span]
                for e, (out, span) in enumerate(zip(outputs, spans, strict=True))
            ]
        merged = torch.cat(outputs)
        if self.expert_order is not None:
            merged = merged.index_select(0, self.expert_restore)
        home = torch.arange(rows, device=self.device) % local_tokens.shape[0]
        out = torch.zeros_like(local_tokens).index_add(0, home, merged) * weights.sum(-1, keepdim=True)
        out = out.repeat(self.tokens // out.shape[0], 1) if out.shape[0] != self.tokens else out
        if "moe.shared_in" in self.weights:
            out = out + self._mlp(y, "moe.shared_in", "moe.shared_out")
        return out

    def _dropout(self, x: Tensor) -> Tensor:
        return F.dropout(x, DROPOUT_P) if self.spec.job.dropout else x

    def forward(self, x: Tensor) -> Tensor:
        """The layer, under torchtitan's per-op SAC where the plan recomputes selectively with it."""
        if self.spec.plan.recompute == "selective" and self._op_sac:
            return checkpoint(self._layer, x, use_reentrant=False, context_fn=op_sac_contexts)
        return self._layer(x)

    @property
    def _op_sac(self) -> bool:
        return self.spec.job.software.selective_recompute == "alternate_matmuls"

    def _layer(self, x: Tensor) -> Tensor:
        """The layer: x + attention(norm(x)), then + mlp(norm(.)) (pre-norm, as every bundled model)."""
        x = x + self._attention(x)
        y = self._gathered(self._norm(x, "norm2"))
        mlp = self._moe(y) if self.spec.moe else self._mlp(y, "mlp.in", "mlp.out")
        return x + self._dropout(self._scattered(mlp))

    def parameters(self) -> list[Tensor]:
        return list(self.weights.values())

    def step(self) -> None:
        """One training pass of the shard: (recomputed forward,) forward, backward."""
        if self.spec.plan.recompute == "full":
            with torch.no_grad():
                self.forward(self.x)
        out = self.forward(self.x)
        torch.autograd.grad(out, [self.x, *self.parameters()], self.grad_out)


SAC_SAVED_OPS = (
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten.max.default,
)
"""Ops whose outputs torchtitan's per-op SAC keeps (torchtitan llama3 parallelize.py ``_save_list``,
quoted in stacks/torchtitan.yaml; its reduce_scatter entry has no local stand-in here)."""


def op_sac_contexts() -> tuple[object, object]:
    """torchtitan's per-op SAC policy: save the listed ops' outputs except every second matmul's,
    recompute everything else (its ``_custom_policy``)."""
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: object, func: object, *args: object, **kwargs: object) -> CheckpointPolicy:
        mode = "recompute" if getattr(ctx, "is_recompute", False) else "forward"
        if func == torch.ops.aten.mm.default:
            counts[mode] += 1
            if counts[mode] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in SAC_SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def layer_call(term: TermSpec, device: torch.device) -> Callable[[], None]:
    """A function that runs one forward + backward of the term's layer shard (synchronised on GPU)."""
    assert term.layer is not None
    shard = Shard(term.layer, device, GEMM_DTYPES[term.dtype])
    if device.type == "cuda":

        def run_cuda() -> None:
            shard.step()
            torch.cuda.synchronize(device)

        return run_cuda
    return shard.step

"""Disaggregated serving (ARCHITECTURE 9.6): prefill and decode in separate pools (DistServe,
Zhong et al., OSDI 2024, arXiv:2401.09670; Splitwise, Patel et al., ISCA 2024).

  prefill pool  each replica runs batches of whole prompts, the engine's token budget at a time
                (at least one prompt): rate_p = prompts per round / round time; TTFT = that round
                + the KV transfer.
  KV transfer   isl x KV bytes per token (all layers), and a hybrid's Mamba-2 state (the same at any
                length), from the prefill replica to a decode replica,
                each prefill GPU sending its shard over its own link: NVLink inside one fast
                domain, else its NIC (NIXL/UCX over RDMA, one NIC per GPU on DGX-class nodes).
  decode pool   each replica decodes B sequences with no prompt in its rounds:
                rate_d = B / (osl x TPOT).
  split         the integer numbers of prefill and decode replicas (n_p g_p + n_d g_d <= N) that
                maximise min(n_p rate_p, n_d rate_d): the pool ratio that balances them.
Output tokens/s per GPU counts every GPU of the cluster.
"""

from __future__ import annotations

import numpy as np

from planner.serving.kv import kv_bytes_per_token, sequence_state_bytes_per_gpu
from planner.serving.layout import Layouts
from planner.serving.memory import reserved_context
from planner.serving.schemas import ServeCandidate, ServeRequest
from planner.serving.step import Setting, round_terms


def kv_transfer_s(s: Setting, prefill: Layouts, input_len: int) -> np.ndarray:
    """Seconds to move one prompt's KV cache (and a hybrid's Mamba-2 state) from a prefill replica to
    a decode replica."""
    nbytes = input_len * kv_bytes_per_token(s.model, s.kv_dtype, float(input_len), s.engine.chunked_kv)
    nbytes += float(sequence_state_bytes_per_gpu(s.model, s.ssm_state_dtype, 1.0, 1.0, False))  # the whole state
    one_domain = s.cluster.num_gpus <= s.cluster.fast_domain_gpus
    link = s.cluster.intra_node if one_domain else s.cluster.inter_node
    latency = link.latency_s
    return nbytes / (link.bus_bandwidth_bytes_per_s * prefill.gpus_per_replica) + latency


def prefill_prompts(s: Setting, req: ServeRequest) -> int:
    """Whole prompts in one prefill round of a pipeline stage: the engine's token budget at a time,
    at least one."""
    return max(1, s.engine.max_num_batched_tokens // req.input_len)


def prefill_pool(s: Setting, lay: Layouts, req: ServeRequest) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(requests/s per replica, TTFT s, fits) of each layout as a prefill-only replica, which holds
    ``prefill_prompts`` x pp prompts at a time (one round in each pipeline stage)."""
    isl = req.input_len
    prompts = prefill_prompts(s, req)
    mem = s.memory(lay, float(isl))
    fits = mem.max_concurrency >= prompts * lay.pp
    zeros = np.zeros(len(lay))
    context = np.full(len(lay), float(isl))
    round_s = round_terms(s, lay, zeros, context, np.full(len(lay), float(prompts * isl)) * lay.pp, isl).total_s
    rate = prompts * lay.pp / round_s
    # the TTFT a client measures: the server's request path too
    ttft = round_s + kv_transfer_s(s, lay, isl) + s.params.request_path_s
    return rate, ttft, fits


def disaggregated_candidates(s: Setting, lay: Layouts, req: ServeRequest) -> tuple[list[ServeCandidate], int, str]:
    """One candidate per decode layout: its best prefill layout, split and batch."""
    from planner.serving.search import BATCH_GRID, _kv_per_token, _meets

    N = s.cluster.num_gpus
    if N < 2:
        return [], 0, "disaggregation needs at least 2 GPUs (one prefill, one decode replica)"
    isl, osl = float(req.input_len), float(req.output_len)
    p_rate, p_ttft, p_fits = prefill_pool(s, lay, req)
    if req.ttft_s is not None:
        p_fits &= p_ttft <= req.ttft_s
    mem = s.memory(lay, reserved_context(s.engine, isl, osl))
    cands: list[ServeCandidate] = []
    considered = 0
    for j in range(len(lay)):
        cap = mem.max_concurrency[j]
        if cap < 1:
            continue
        batches = np.asarray(sorted({b for b in BATCH_GRID if b < cap} | {int(cap)}), dtype=float)
        dl = lay.take(np.full(len(batches), j))
        terms = round_terms(s, dl, batches, np.full(len(batches), isl + osl / 2.0), np.zeros(len(batches)), isl)
        tpot = terms.total_s
        d_rate = batches / (osl * tpot)
        g_d = float(lay.gpus_per_replica[j])
        best: tuple[float, int, int, int, int] | None = None
        for i in np.flatnonzero(p_fits):
            g_p = float(lay.gpus_per_replica[i])
            for n_p in range(1, int((N - g_d) // g_p) + 1):
                n_d = int((N - n_p * g_p) // g_d)
                if n_d < 1:
                    continue
                rate = np.minimum(n_p * p_rate[i], n_d * d_rate)
                considered += len(rate)
                ok = _meets(req, np.full(len(rate), p_ttft[i]), tpot)
                if req.request_rate is not None:
                    ok &= rate >= req.request_rate
                    score = np.where(ok, -batches, -np.inf)
                elif req.concurrency is not None:
                    ok &= batches * n_d <= max(req.concurrency, n_d)
                    score = np.where(ok, rate, -np.inf)
                else:
                    score = np.where(ok, rate, -np.inf)
                k = int(np.argmax(score))
                if np.isfinite(score[k]) and (best is None or score[k] > best[0]):
                    best = (float(score[k]), int(i), n_p, n_d, k)
        if best is None:
            continue
        _, i, n_p, n_d, k = best
        rate = min(n_p * p_rate[i], n_d * d_rate[k])
        if req.request_rate is not None:
            rate = req.request_rate
        split = {
            "prefill_replicas": n_p,
            "prefill_tp": int(lay.tp[i]),
            "prefill_pp": int(lay.pp[i]),
            "prefill_ep": int(lay.ep[i]),
            "prefill_attention_dp": int(bool(lay.attention_dp[i])),
            "prefill_gpus": int(n_p * lay.gpus_per_replica[i]),
            "prefill_batch": prefill_prompts(s, req) * int(lay.pp[i]),
            "decode_replicas": n_d,
            "decode_gpus": int(n_d * g_d),
        }
        cfg = {
            "tp": int(lay.tp[j]),
            "pp": int(lay.pp[j]),
            "ep": int(lay.ep[j]),
            "attention_dp": bool(lay.attention_dp[j]),
            "replicas": n_d,
            "gpus_per_replica": int(g_d),
            "prefill_decode_split": split,
        }
        cands.append(
            ServeCandidate(
                config=cfg,
                batch_per_replica=float(batches[k]),
                ttft_s=float(p_ttft[i]),
                tpot_s=float(tpot[k]),
                output_tokens_per_s_per_gpu=float(rate * osl / N),
                output_tokens_per_s_per_user=float(1.0 / tpot[k]),
                max_concurrency=int(cap * n_d),
                memory_per_gpu_bytes=float(mem.total_bytes[j]),
                memory_breakdown_bytes=mem.breakdown(j),
                kv_cache_bytes_per_token=_kv_per_token(s, req),
                tpot_breakdown_s=terms.as_dict(k),
                meets_targets=True,
                warnings=[
                    f"prefill:decode GPUs {split['prefill_gpus']}:{split['decode_gpus']}; KV transfer "
                    f"{float(kv_transfer_s(s, lay.take(np.array([i])), req.input_len)[0]) * 1e3:.2f} ms per request",
                ],
            )
        )
    reason = "" if cands else "no prefill/decode split meets the targets within memory"
    return cands, considered, reason

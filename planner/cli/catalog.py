"""``plan list models|clusters|stacks`` and ``plan show model|cluster|stack``: the bundled catalogs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from planner.cli.app import console, emit_json, list_app, show_app
from planner.cli.options import GpusOpt, JsonOpt, NodesOpt, SeqOpt


def _listing(items: list[Any], as_json: bool, to_json: Callable[[Any], Any], render: Callable[..., None]) -> None:
    """A catalog as one JSON list, or as ``render(console, items)`` prints it."""
    if as_json:
        emit_json([to_json(item) for item in items])
    else:
        render(console(), items)


def _dump(entry: Any) -> Any:
    return entry.model_dump(mode="json")


@list_app.command("models")
def list_models_cmd(as_json: JsonOpt = False) -> None:
    """Bundled models with parameter counts."""
    from planner.catalog import list_models
    from planner.render import print_models

    _listing(list_models(), as_json, _model_json, print_models)


@list_app.command("clusters")
def list_clusters_cmd(as_json: JsonOpt = False) -> None:
    """Bundled hardware profiles; a cluster is <profile> or <profile>x<nodes>."""
    from planner.catalog import list_profiles
    from planner.render import print_profiles

    _listing(list_profiles(), as_json, _dump, print_profiles)


@list_app.command("stacks")
def list_stacks_cmd(as_json: JsonOpt = False) -> None:
    """Software stacks (--stack): attention kernel, TP overlap, gradient format, calibration."""
    from planner.catalog import list_stacks

    _listing(list_stacks(), as_json, _dump, _print_stacks)


def _print_stacks(_: Any, stacks: list[Any]) -> None:
    width = max((len(s.name) for s in stacks), default=0)
    for s in stacks:
        fitted = f"{s.layer_overhead_us:.3g} us/layer" if s.layer_overhead_us is not None else "not calibrated"
        typer.echo(
            f"{s.name:{width}} {s.attention_kernel:5} attention, TP overlap {'on' if s.tp_comm_overlap else 'off'}, "
            f"grads {s.grad_reduce_dtype}, ZeRO {s.default_zero_stage}, {fitted}: {s.description}"
        )


@show_app.command("stack")
def show_stack_cmd(
    name: Annotated[str, typer.Argument(help="Stack name or YAML path.")], as_json: JsonOpt = False
) -> None:
    """Every value of a software stack with its source."""
    from planner.catalog import load_stack

    stack = load_stack(name)
    if as_json:
        emit_json(stack.model_dump(mode="json"))
        return
    typer.echo(f"{stack.name}: {stack.description}")
    for key, value in stack.model_dump(exclude={"name", "description", "sources", "calibration"}).items():
        source = " ".join(stack.sources.get(key, "").split())
        if value is None and not source:
            source = "not calibrated: no fit determines it (see plan calibrate --from-runs); priced as neutral"
        typer.echo(f"  {key} = {value}" + (f"  [{source[:160]}]" if source else ""))
    if stack.calibration is not None:
        typer.echo(f"  calibrated by `{stack.calibration.command}` over {len(stack.calibration.rows)} rows")


def _model_json(model: Any, seq_len: int | None = None) -> dict[str, Any]:
    from planner.cost.flops import model_flops_per_token

    s = seq_len or model.default_seq_len or 4096
    return {
        "name": model.name,
        "aliases": model.aliases,
        "spec": model.model_dump(mode="json"),
        "parameters": model.parameter_counts.model_dump(mode="json"),
        "gated_mlp": model.is_gated_mlp,
        "is_moe": model.is_moe,
        "num_moe_layers": model.num_moe_layers,
        "seq_len": s,
        # training runs the model's MTP modules too, as `plan estimate` counts them in its MFU
        "mtp_layers": model.num_nextn_predict_layers,
        # attention over the full s x s square (PaLM, torchtitan) and over its causal half (Megatron-LM)
        "training_flops_per_token": model_flops_per_token(model, s, model.num_nextn_predict_layers),
        "training_flops_per_token_causal": model_flops_per_token(model, s, model.num_nextn_predict_layers, True),
    }


@show_app.command("model")
def show_model_cmd(
    name: Annotated[str, typer.Argument(help="Catalog name, alias, YAML or config.json path.")],
    seq_len: SeqOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Parameters (total, active, per layer, embedding, LM head) and FLOPs per token."""
    from planner.catalog import load_model

    model = load_model(name)
    info = _model_json(model, seq_len)
    if as_json:
        emit_json(info)
        return
    from planner.render import print_model

    print_model(
        console(),
        model,
        info["training_flops_per_token"],
        info["seq_len"],
        info["mtp_layers"],
        info["training_flops_per_token_causal"],
    )


@show_app.command("cluster")
def show_cluster_cmd(
    name: Annotated[str, typer.Argument(help="<profile>, <profile>x<N>, or a YAML path.")],
    nodes: NodesOpt = None,
    gpus: GpusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """GPUs, peak FLOP/s, memory and link bandwidths of a cluster."""
    from planner.catalog import load_cluster

    cluster = load_cluster(name, nodes=nodes, gpus=gpus)
    if as_json:
        emit_json(
            {
                "name": cluster.name,
                "description": cluster.describe(),
                "num_nodes": cluster.num_nodes,
                "num_gpus": cluster.num_gpus,
                "gpus_per_node": cluster.gpus_per_node,
                "gpus_per_host": cluster.gpus_per_host,
                "fast_domain_gpus": cluster.fast_domain_gpus,
                # the whole cluster's, named so beside the per-GPU keys (a review, 2026-12-08)
                "cluster_peak_bf16_flops_per_s": cluster.num_gpus * cluster.gpu.peak_flops_per_s("bf16"),
                "peak_bf16_flops_per_s_per_gpu": cluster.gpu.peak_flops_per_s("bf16"),
                "hbm_capacity_bytes_per_gpu": cluster.gpu.hbm_capacity_bytes,
                "intra_node_bus_bandwidth_bytes_per_s": cluster.intra_node.bus_bandwidth_bytes_per_s,
                "inter_node_bus_bandwidth_bytes_per_s": cluster.inter_node.bus_bandwidth_bytes_per_s,
                "profile": cluster.profile.model_dump(mode="json"),
            }
        )
        return
    from planner.render import print_cluster

    print_cluster(console(), cluster)

"""How the command line declares its options: once, in groups, handed to each command as typed
values (planner/cli/options.py), with no import cycle between the CLI's modules."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from planner.cli.options import CAPS, JOB, MESH, REPLAY, TARGET, Mesh, Target, command
from planner.schemas.job import JobSpec
from planner.schemas.parallel import ParallelConfig
from planner.validate.run import ReplaySettings, ValidationSettings

CLI = Path(__file__).resolve().parents[1] / "planner" / "cli"


def test_a_command_gets_one_typed_value_per_group_built_from_its_own_options() -> None:
    @command(without=["price"])
    def body(*, target: Target, top: int = 3, mesh: Mesh) -> tuple[Target, int, Mesh]:
        return target, top, mesh

    names = list(inspect.signature(body).parameters)
    assert names == ["model", "cluster", "nodes", "gpus", "top", *(opt.name for opt in MESH)]
    target, top, mesh = body(model="llama70b", cluster="dgx-h100", tp=8, top=5)
    assert (target.model, target.price, top, mesh.tp, mesh.pp) == ("llama70b", None, 5, 8, None)
    with pytest.raises(AttributeError):
        mesh.tpp  # noqa: B018  (a misspelled option is an error, not None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        mesh.tp = 4  # type: ignore[misc]


def test_a_command_that_names_an_option_twice_or_leaves_out_an_unknown_one_fails_when_declared() -> None:
    with pytest.raises(TypeError, match=r"without=\['tpp'\]"):

        @command(without=["tpp"])
        def left_out(*, mesh: Mesh) -> None: ...

    with pytest.raises(TypeError, match=r"\['tp'\] are declared twice"):

        @command
        def twice(*, mesh: Mesh, tp: int = 1) -> None: ...


def test_every_option_of_the_groups_is_declared_once() -> None:
    names = [opt.name for group in (TARGET, JOB, MESH, REPLAY, CAPS) for opt in group]
    assert len(names) == len(set(names))
    flags = [flag for group in (TARGET, JOB, MESH, REPLAY, CAPS) for opt in group for flag in opt.info.param_decls]
    flags += [opt.info.default for group in (TARGET, JOB, MESH, REPLAY, CAPS) for opt in group]  # the first flag
    assert len(flags) == len(set(flags))


def test_no_command_reads_ctx_params() -> None:
    # the bodies read the typed values of their own options; ctx.params dropped a misspelled key silently
    for path in CLI.glob("*.py"):
        assert "ctx.params" not in path.read_text(), path.name


def test_the_command_modules_import_only_the_shared_modules() -> None:
    # no cycle: app, options and inputs import no command module, and no command module another one
    shared = {"app", "options", "inputs"}
    for path in CLI.glob("*.py"):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        imported = {
            node.module.removeprefix("planner.cli.")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("planner.cli.")
        }
        imported |= {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "planner.cli"
            for alias in node.names
        }
        allowed = {"app", "options"} if path.stem in shared else shared
        assert imported <= allowed - {path.stem}, (path.name, imported)


def test_the_mesh_options_are_the_parallel_config_fields_and_say_what_the_fields_say() -> None:
    assert [opt.name for opt in MESH] == list(ParallelConfig.model_fields)
    assert [opt.name for opt in REPLAY + CAPS] == list(ValidationSettings.model_fields)
    assert [opt.name for opt in REPLAY] == list(ReplaySettings.model_fields)
    made = [*MESH, *(opt for opt in JOB if opt.name in JobSpec.model_fields and opt.name != "training_tokens")]
    assert len(made) == 17 + 19  # every ParallelConfig field; 19 JobSpec fields set by one option each
    for opt in made:
        field = {**ParallelConfig.model_fields, **JobSpec.model_fields}[opt.name]
        # a float field's range is said after its description (click's FloatRange, which would show
        # it, compares 'nan' before any callback and calls it out of range)
        said = field.description + "."
        said += {"max_batch_growth": " A number >= 0 and <= 10.", "memory_headroom": " A number >= 0 and <= 0.5."}.get(
            opt.name, ""
        )
        assert field.description and opt.info.help == said, opt.name


def test_the_options_made_from_fields_keep_their_choices_and_ranges(cli) -> None:
    # choices from the Literal types, ranges from ge/le and PositiveInt, checked before any work
    text = " ".join(cli("estimate", "--help").out.split())
    for shown in ("<gpipe|1f1b|interleaved-1f1b|zb-h1|dualpipe|dualpipev>", "<none|selective|full>", "[0<=x<=3]"):
        assert shown in text
    assert "<alltoall|allgather|flex>" in text and "[default: alltoall]" in text
    for args, flag in [
        (("--zero-stage", "4"), "--zero-stage"),
        (("--schedule", "1f2b"), "--schedule"),
        (("--recompute-layers", "0"), "--recompute-layers"),
        (("--max-batch-growth", "-0.1"), "--max-batch-growth"),
        (("--mtp-layers", "65"), "--mtp-layers"),
        (("--max-batch-growth", "nan"), "--max-batch-growth"),
    ]:
        r = cli("estimate", "-m", "llama8b", "-c", "dgx-h100", *args)
        assert r.code == 2 and r.err.startswith(f"error: Invalid value for '{flag}'"), r.err


@pytest.mark.parametrize(
    "command", [(), ("estimate",), ("capacity",), ("export",), ("serve",), ("calibrate",), ("serve-calibrate",)]
)
def test_no_option_shows_a_bare_type_for_its_value(cli, command: tuple[str, ...]) -> None:
    """Every option's value is named (N, X, DTYPE, ENGINE, ...) or lists its choices: a bare type
    (click's '<str>', '<float>') tells a user nothing about what to give."""
    text = cli(*command, "--help").out
    assert "Options:" in text
    for bare in ("<str>", "<float>", "<int>", "<path>", "TEXT", "FLOAT", "INTEGER"):
        assert bare not in text, (command, bare)

"""Catalog: load models, hardware profiles and clusters by name or by path.

Names resolve against the YAML files shipped in models/ and hardware_profiles/ (inside the
installed package, or at the repository root in a checkout). ``--model`` also takes a path to a
model YAML or a Hugging Face config.json; ``--cluster`` takes ``<profile>`` (one node),
``<profile>x<N>`` (N nodes, e.g. dgx-h100x16 = 16 x 8 GPUs), or a YAML path. Every failure is a
``PlannerError`` with one line naming the file, the field and what is allowed.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import numbers
import os
import re
import statistics
from collections.abc import Callable
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from planner.atomic import LINK_LOOPS, link_loops
from planner.errors import PlannerError, shown, shown_value, validate_as
from planner.hf_config import model_from_hf_config
from planner.schemas.base import integer_shown
from planner.schemas.hardware import MAX_CLUSTER_GPUS, ClusterSpec, HardwareProfile
from planner.schemas.model import ModelSpec
from planner.schemas.stack import Stack

_PACKAGE_DIR = Path(__file__).resolve().parent
CATALOG_KINDS = ("models", "hardware_profiles", "stacks")
T = TypeVar("T", bound=BaseModel)

# ASCII digits (\\d takes full-width ones)
CLUSTER_NAME = re.compile(r"^(?P<profile>.+)x(?P<nodes>-?[0-9]+)(?:-(?P<gpus>[0-9]+)gpus)?$")
"""``<profile>x<N>``: N nodes of a profile. The profile part is matched first as a whole name,
so a profile that itself ends in 'x' (mi300x) reads as mi300xx4 for four nodes. A negative N is
matched too, to be refused as a node count (dgx-h100x-1 had read as an unknown cluster).
``<profile>x<N>-<G>gpus``: G GPUs on N nodes, the name a cluster whose GPUs do not fill its nodes
is echoed under (``_recounted``), so that it loads back as it was planned: 12 GPUs of DGX H100 had
been named dgx-h100x2, which loads 16 (a review, 2026-12-07)."""


def catalog_dir(kind: str) -> Path:
    """Folder of shipped YAML for ``kind`` ('models', 'hardware_profiles' or 'stacks').

    A wheel carries them inside the package (planner/models, planner/hardware_profiles,
    planner/stacks); a checkout or editable install has them at the repository root.
    """
    for candidate in (_PACKAGE_DIR / kind, _PACKAGE_DIR.parent / kind):
        if candidate.is_dir():
            return candidate
    raise PlannerError(f"catalog folder '{kind}' not found next to {_PACKAGE_DIR}; reinstall the package")


MAX_NESTING = 200
"""The deepest nesting of brackets a YAML or JSON file may have: the catalog's files nest a few
levels, and libyaml's C parser overflows its stack (a segmentation fault, not an exception) on
tens of thousands. A bound, not a measurement."""

_BRACKETS = re.compile(r"[^\[\]{}]+")


def _check_nesting(path: Path, text: str) -> None:
    """Refuse a text whose brackets nest deeper than MAX_NESTING (brackets inside quoted strings
    count too: a file would need hundreds of them in a row)."""
    depth = 0
    for ch in _BRACKETS.sub("", text):
        depth = depth + 1 if ch in "[{" else max(depth - 1, 0)
        if depth > MAX_NESTING:
            raise PlannerError(
                f"{path}: nested too deeply to read (more than {MAX_NESTING} lists or mappings inside each other)"
            )


MAX_INPUT_BYTES = 64 * 2**20
"""The largest YAML or JSON file read: 64 MiB, 25x the largest file the project reads
(shared/groundtruth/inference_runs.yaml, 2.6 MB, 1,247 rows). Not a measurement but a bound: a
stream that never ends (``--workload /dev/zero``) had been read until memory ran out."""


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse a YAML (or JSON) file with safe_load; the top level must be a mapping. A shipped
    catalog file is parsed once: later runs read its parsed form from the cache (``_cached``). A
    pipe is read as any file (``--workload <(...)``, ``/dev/stdin``): one that no process writes
    to waits, as ``cat`` would; one that writes more than ``MAX_INPUT_BYTES`` is refused."""
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_INPUT_BYTES + 1)
        if len(raw) > MAX_INPUT_BYTES:
            raise PlannerError(
                f"{path}: larger than {MAX_INPUT_BYTES // 2**20} MiB, the most a YAML or JSON input may hold "
                "(a stream that does not end?)"
            )
        text = raw.decode("utf-8")
    except OSError as err:
        raise PlannerError(f"{path}: cannot read: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise PlannerError(
            f"{path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}): give a YAML or JSON "
            "file saved as UTF-8"
        ) from None
    cache = _cache_file(path)
    cached = _cached(cache, text) if cache is not None else None
    if cached is not None:
        return cached
    _check_nesting(path, text)
    import yaml  # ~20 ms, which a run whose catalog files are all cached does without

    try:
        if path.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        else:
            data = yaml.load(text, Loader=_unique_key_loader())
    except DuplicateKeyError as err:
        raise PlannerError(f"{path}: key {shown_value(err.key)} appears twice{err.where}; give each key once") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise PlannerError(f"{path}: malformed YAML{where}: {problem}") from None
    except json.JSONDecodeError as err:
        raise PlannerError(f"{path}: malformed JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise PlannerError(f"{path}: nested too deeply to read (lists or mappings inside each other)") from None
    except ValueError as err:  # a value the parser cannot build: a date that is none, an integer of
        # more digits than Python reads from text (4,300)
        what = "a number too long to read" if "digits" in str(err) else "a value that cannot be read"
        raise PlannerError(f"{path}: {what}: {str(err).split(';')[0]}") from None
    if not isinstance(data, dict):
        raise PlannerError(f"{path}: expected a mapping of keys to values at the top level, got {type(data).__name__}")
    if cache is not None:
        _store(cache, text, data)
    return data


class DuplicateKeyError(ValueError):
    """A mapping of a YAML or JSON file states a key twice: the parsers keep the last silently, so
    a value appended to a model file (num_hidden_layers: 40 after its 32) replaced the first."""

    def __init__(self, key: object, where: str = "") -> None:
        super().__init__(f"key {key!r} appears twice{where}")
        self.key = key
        self.where = where


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object as a dict, refusing a key stated twice
    (the JSON decoder gives no line of a key)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise DuplicateKeyError(key)
        data[key] = value
    return data


@cache
def _unique_key_loader() -> type:
    """The safe YAML loader (libyaml's CSafeLoader where installed, else SafeLoader) refusing a
    key stated twice in one mapping. Built on first use: importing yaml costs ~20 ms that a run
    whose catalog files are all cached does without."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class UniqueKeyLoader(base):  # type: ignore[misc, valid-type]
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.checked: set[int] = set()

        def flatten_mapping(self, node: yaml.MappingNode) -> None:
            """Check ``node``'s own keys before SafeConstructor merges ``<<`` keys into it (a key
            stated beside a merge overrides the merged one, as YAML allows): this runs first on
            every mapping, and flattening rewrites ``node.value``, so each node is checked once."""
            if id(node) not in self.checked:
                self.checked.add(id(node))
                _check_unique_keys(self, node)
            super().flatten_mapping(node)

    UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))
    return UniqueKeyLoader


_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
r"""A number in exponent form that YAML 1.1, which PyYAML implements, reads as text: its float needs
a dot and a signed exponent (``1.0e+3``), so ``input_len: 1e3`` or ``1.5e3`` came to a field as the
string '1e3'. YAML 1.2's core schema (yaml.org/spec/1.2.2, section 10.3.2, tag resolution:
``[-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?``) reads them as floats, as
JSON does; the loader adds that form (PyYAML's own floats keep their resolver, underscores as it
allows them). No shipped file holds such a value, so the cache of parsed catalog files is unchanged."""


def _check_unique_keys(loader: Any, node: Any) -> None:
    """Raise ``DuplicateKeyError`` (with both lines) where two scalar keys of ``node`` construct
    to the same value (``1`` and ``0x1``, ``yes`` and ``true`` too); merge keys, and keys that are
    lists or mappings (which the constructor refuses as unhashable), are skipped."""
    import yaml

    seen: dict[Any, yaml.Mark] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)  # a scalar: str, int, float, bool, None, date
        mark = key_node.start_mark
        if key in seen:
            first = seen[key]
            if first.line == mark.line:
                raise DuplicateKeyError(
                    key, f" (line {mark.line + 1}, columns {first.column + 1} and {mark.column + 1})"
                )
            raise DuplicateKeyError(key, f" (lines {first.line + 1} and {mark.line + 1})")
        seen[key] = mark


# ---- the cache of parsed catalog files -----------------------------------------------------------
# A shipped catalog YAML (models/, hardware_profiles/, stacks/) is kept parsed, as JSON, under the
# user's cache folder ($XDG_CACHE_HOME/planner, else ~/.cache/planner), with the text it was parsed
# from: an entry is used only while the file still holds exactly that text, so an edited file is
# parsed again, never read stale. A cache that cannot be read or written is left alone.


def _cache_file(path: Path) -> Path | None:
    """Where the parsed form of ``path`` is kept, if it is a shipped catalog YAML; else None."""
    kind = path.parent.name
    if path.suffix != ".yaml" or kind not in CATALOG_KINDS:
        return None
    try:
        if path.parent.resolve() != catalog_dir(kind).resolve():
            return None
    except (OSError, PlannerError):
        return None
    root = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(root):  # the XDG base directory spec: a relative path is ignored
        home = os.path.expanduser("~")
        if not os.path.isdir(home):  # no home to keep a cache in (HOME unset or gone): none kept
            return None
        root = os.path.join(home, ".cache")
    return Path(root) / "planner" / "catalog" / kind / f"{path.stem}.json"


def _cached(cache: Path, text: str) -> dict[str, Any] | None:
    """The parsed form of ``text`` kept in ``cache``, or None: no entry, an entry for another text,
    or one that is not what ``_store`` wrote (not a regular file: a pipe would block; unreadable,
    nested past the parser, or its data changed since: its checksum no longer matches), which is
    parsed again and overwritten."""
    try:
        if not cache.is_file():
            return None
        entry = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or entry.get("text") != text or not isinstance(entry.get("data"), dict):
        return None
    try:
        if entry.get("check") != _checksum(entry["data"]):
            return None
    except (TypeError, ValueError, RecursionError):
        return None
    return entry["data"]


def _checksum(data: dict[str, Any]) -> str:
    """A digest of parsed data as ``_store`` keeps it, so that an entry edited or damaged after it
    was written (the data of another file, a key of the wrong type) is not served."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _store(cache: Path, text: str, data: dict[str, Any]) -> None:
    """Keep ``data``, parsed from ``text``, in ``cache``; only what JSON gives back unchanged
    (not dates, NaN or non-string keys), and without a word when the folder is not writable."""
    try:
        encoded = json.dumps({"text": text, "data": data, "check": _checksum(data)})
        if json.loads(encoded)["data"] != data:
            return
        cache.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, TypeError, ValueError):
        return
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(encoded, encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        tmp.unlink(missing_ok=True)


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.endswith((".yaml", ".yml", ".json"))


def _name_text(value: object, kind: str, spec: str) -> str:
    """``value`` (a name or a path) as text; anything else (another spec, a number) is refused by
    its type, where ``str()`` would print a spec's repr as a name, or fail on it as a file name too
    long."""
    if isinstance(value, (str, Path)):
        return str(value)
    raise PlannerError(f"{kind}: expected a name, path or {spec}, got {type(value).__name__}")


def _is_file(path: Path, text: str, kind: str) -> bool:
    """Whether ``path`` names a file. A name the file system refuses (over 255 characters, say)
    names none; where ``text`` looks like a path, that is the error."""
    try:
        return path.is_file()
    except OSError as err:
        if _looks_like_path(text):
            raise PlannerError(f"{kind} file '{shown(text)}' cannot be opened: {err.strerror or err}") from None
        return False


def _not_a_file(path: Path, expected: str) -> str:
    """What ``path`` is, for the error of a path that names no regular file: a folder, a device
    or pipe (``/dev/null`` read as nothing), or nothing at all."""
    if path.is_dir():
        return f"is a directory, not {expected}"
    if path.exists():
        return f"is not a regular file (a device or pipe), not {expected}"
    if link_loops(path):
        return f"is a link that {LINK_LOOPS}"
    if path.is_symlink():
        return f"is a link to '{os.readlink(path)}', which does not exist"
    return "does not exist"


def _is_checkpoint_folder(path: Path) -> bool:
    """Whether ``path`` is a folder holding a config.json; a name the file system refuses (too
    long) is none."""
    try:
        return path.is_dir() and (path / "config.json").is_file()
    except OSError:
        return False


def _unknown(kind: str, name: str, known: list[str], hint: str) -> PlannerError:
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
    suggestion = f"; did you mean {', '.join(close)}?" if close else ""
    return PlannerError(f"unknown {kind} '{name}'{suggestion} ({hint})")


# ---- models ------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _model_files() -> dict[str, Path]:
    """Catalog name and every alias -> file. Aliases are read from the files themselves."""
    index: dict[str, Path] = {}
    for path in sorted(catalog_dir("models").glob("*.yaml")):
        data = read_yaml(path)
        for key in [path.stem, *data.get("aliases", [])]:
            index[str(key).lower()] = path
    return index


def model_names() -> list[str]:
    """Catalog model names (file stems), sorted."""
    return sorted({p.stem for p in _model_files().values()})


def list_models() -> list[ModelSpec]:
    return [load_model(name) for name in model_names()]


def model_for_repo(hf_id: str) -> ModelSpec | None:
    """The catalog model whose ``hf_repos`` hold the Hugging Face repository ``hf_id`` (case
    ignored), or None: how a runs file's row finds the model it names."""
    key = hf_id.lower()
    return next((m for m in list_models() if key and key in (r.lower() for r in m.hf_repos)), None)


def cached_per_file_stamp(load: Callable[[Path], T]) -> Callable[[Path], T]:
    """``load`` cached by the path and its stamp, (modification time in ns, size): a file edited
    in the same process (a notebook's model, stack or profile YAML) is read again, where a cache by
    path alone had kept the first reading (a review: an edited layer count, and a misspelt key,
    went unseen)."""

    @cache
    def at(path: Path, stamp: tuple[int, int]) -> T:
        return load(path)

    def cached(path: Path) -> T:
        st = path.stat()
        return at(path, (st.st_mtime_ns, st.st_size))

    return cached


@cached_per_file_stamp
def _load_model_file(path: Path) -> ModelSpec:
    if path.suffix == ".json":
        # a checkpoint's config.json is named for its folder (Meta-Llama-3-8B/config.json), another file for itself
        folder = path.name == "config.json" and path.parent.name
        return model_from_hf_config(read_yaml(path), name=folder or path.stem, where=str(path))
    return validate_as(ModelSpec, read_yaml(path), str(path))


def _resolve(text: str, kind: str, index: dict[str, Path], loader: Callable[[Path], T], hint: str) -> T:
    """Load ``text`` as a file path (anything that looks like one, or names an existing file) or
    as a catalog name or alias from ``index``; one-line errors for both."""
    if not text.strip():  # Path('') is the current folder, whose config.json nobody named
        raise PlannerError(f"{kind}: empty name; {hint}")
    path = Path(text).expanduser()
    echoed = shown(text)
    if kind == "model" and _is_checkpoint_folder(path):
        path = path / "config.json"  # a Hugging Face checkpoint folder, as the engines load one
    is_file = _is_file(path, text, kind)
    if _looks_like_path(text) or is_file:
        if not is_file:
            what = _not_a_file(path, "a YAML or JSON file")
            if kind == "model" and path.is_dir():  # a folder is read as a Hugging Face checkpoint
                what += " or a Hugging Face checkpoint folder (it holds no config.json)"
            raise PlannerError(f"{kind} file '{echoed}' {what}")
        return loader(path.resolve())
    if len(text) > 200:
        raise PlannerError(f"unknown {kind} '{echoed}': names are short; {hint}")
    found = index.get(text.lower())
    if found is None:
        raise _unknown(kind, text, sorted(index), hint)
    return loader(found)


def load_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A ModelSpec from a catalog name or alias, a model YAML, or a Hugging Face config.json."""
    if isinstance(name_or_path, ModelSpec):
        # checked again: pydantic's model_copy(update=...) makes a spec without running its checks
        # warnings=False: a value of the wrong type is the check's to name, not the serializer's to warn of
        return validate_as(ModelSpec, name_or_path.model_dump(warnings=False), f"model '{shown(name_or_path.name)}'")
    hint = "see `plan list models`, or give a YAML or config.json path"
    text = _name_text(name_or_path, "model", "ModelSpec")
    # A catalog name is its file's stem, and no alias is a name (test_catalog), so a name needs
    # no index of the aliases, which reads every model file.
    stems = _files_by_stem("models")
    index = stems if text.lower() in stems else _model_files()
    return _resolve(text, "model", index, _load_model_file, hint)


# ---- hardware profiles and clusters -----------------------------------------------------------
@cache
def _files_by_stem(kind: str) -> dict[str, Path]:
    """Lower-case file stem -> file, of the shipped YAML of ``kind`` (profiles, stacks: the stem
    is the name)."""
    return {p.stem.lower(): p for p in sorted(catalog_dir(kind).glob("*.yaml"))}


def _profile_files() -> dict[str, Path]:
    return _files_by_stem("hardware_profiles")


def profile_names() -> list[str]:
    return sorted(_profile_files())


@cached_per_file_stamp
def _load_profile_file(path: Path) -> HardwareProfile:
    return with_calibration_of(validate_as(HardwareProfile, read_yaml(path), str(path)), str(path))


FITTED_GPU_FIELDS = ("sustained_tensor_fraction", "fp8_rowwise_gemm_fraction", "fp8_block_gemm_fraction")
"""GPU values ``plan calibrate --from-runs`` fits (``planner.fit_runs``), which a profile that is
``calibrated_like`` another takes from it."""


FITTED_SOURCE_PREFIX = "fitted by"
"""How the source of a value ``plan calibrate --from-runs --write`` fitted begins
(``calibration_io.source_text``)."""


@cache
def _fitted_sustained() -> tuple[tuple[str, float], ...]:
    """(profile, sustained fraction) of every shipped profile whose fraction ``plan calibrate
    --from-runs`` fitted (its source says so), read from the files without validating them."""
    out = []
    for name, path in sorted(_profile_files().items()):
        gpu = read_yaml(path).get("gpu") or {}
        value = gpu.get("sustained_tensor_fraction")
        source = str((gpu.get("sources") or {}).get("sustained_tensor_fraction", ""))
        if value is not None and source.startswith(FITTED_SOURCE_PREFIX):
            out.append((name, float(value)))
    return tuple(out)


def with_sustained_default(profile: HardwareProfile) -> HardwareProfile:
    """A GPU with no sustained fraction of its own (nor a ``calibrated_like`` donor's) takes the
    median of the shipped fitted ones, as the fit does for a GPU its rows cannot fix
    (``fit_runs.TRANSFERRED_FIELDS``: every GPU measured sustains 74-94% of its benchmark rate in
    training, so 1 is the one value known to be wrong). A profile whose rates are measured as
    sustained states 1 itself (localhost-cpu)."""
    fitted = _fitted_sustained()
    if profile.gpu.sustained_tensor_fraction is not None or not fitted:
        return profile
    median = statistics.median(v for _, v in fitted)
    source = (
        "not measured on this GPU: the median of the fractions `plan calibrate --from-runs` fitted on "
        + ", ".join(f"{n} {v:.3g}" for n, v in fitted)
        + " (planner/catalog.py with_sustained_default)"
    )
    sources = {**profile.gpu.sources, "sustained_tensor_fraction": source}
    gpu = profile.gpu.model_copy(update={"sustained_tensor_fraction": round(median, 4), "sources": sources})
    return profile.model_copy(update={"gpu": gpu})


def with_calibration_of(profile: HardwareProfile, where: str) -> HardwareProfile:
    """``profile`` with the fitted GPU values and the calibration of the profile it is
    ``calibrated_like`` (values it sets itself win); without a donor, the sustained fraction a GPU
    does not state is the fitted profiles' median (``with_sustained_default``)."""
    if profile.calibrated_like is None:
        return with_sustained_default(profile)
    if profile.calibrated_like.lower() not in _profile_files():
        raise PlannerError(f"{where}: field 'calibrated_like': unknown hardware profile '{profile.calibrated_like}'")
    donor = load_profile(profile.calibrated_like)
    update = {
        f: getattr(donor.gpu, f)
        for f in FITTED_GPU_FIELDS
        if getattr(profile.gpu, f) is None and getattr(donor.gpu, f) is not None
    }
    sources = {f: f"{donor.name} (calibrated_like): {donor.gpu.sources[f]}" for f in update}
    gpu = profile.gpu.model_copy(update={**update, "sources": {**profile.gpu.sources, **sources}})
    return profile.model_copy(update={"gpu": gpu, "calibration": profile.calibration or donor.calibration})


def load_profile(name_or_path: str | Path | HardwareProfile) -> HardwareProfile:
    """A node profile from a catalog name or a YAML path."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    return _resolve(
        _name_text(name_or_path, "hardware profile", "HardwareProfile"),
        "hardware profile",
        _profile_files(),
        _load_profile_file,
        "see `plan list clusters`",
    )


def list_profiles() -> list[HardwareProfile]:
    return [load_profile(name) for name in profile_names()]


def _count(value: object, field: str, where: str) -> int | None:
    """A node or GPU count as given (None: not given): a positive integer, never ``"4"``, ``2.0``
    or true, which pydantic would coerce (a GPU count of 16.0 once derived no node count and was
    refused as more GPUs than one node has), and the error names this field, not the other."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise PlannerError(f"{where}: field '{field}': must be a positive integer, got {shown_value(value)}")
    return int(value)


def _cluster(name: str, profile: HardwareProfile, nodes: object, gpus: object, where: str) -> ClusterSpec:
    """Apply the node/GPU counts (``--nodes`` / ``--gpus`` win over the name) and validate."""
    num_nodes, num_gpus = _count(nodes, "num_nodes", where), _count(gpus, "num_gpus", where)
    if num_gpus is not None and num_gpus > MAX_CLUSTER_GPUS:  # named before it derives a node count
        raise PlannerError(
            f"{where}: num_gpus {integer_shown(num_gpus)} is more than the {MAX_CLUSTER_GPUS:,} GPUs planned at most"
        )
    gpn = profile.gpus_per_node
    if num_nodes is not None and num_nodes * gpn > MAX_CLUSTER_GPUS:  # before the schema's 64-bit bound names it
        raise PlannerError(
            f"{where}: num_nodes {integer_shown(num_nodes)} x {gpn} GPUs is more than the {MAX_CLUSTER_GPUS:,} GPUs "
            "planned at most"
        )
    if num_nodes is None:
        num_nodes = -(-num_gpus // gpn) if num_gpus is not None else 1
    if num_gpus is None:
        num_gpus = num_nodes * gpn
    cluster = {"name": name, "profile": profile, "num_nodes": num_nodes, "num_gpus": num_gpus}
    return validate_as(ClusterSpec, cluster, where)


def _cluster_name(data: dict[str, Any], path: Path) -> str:
    """A cluster file's ``name``, its file name where it gives none: a non-empty string, which
    ``str()`` would have made of null, a number or a list."""
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise PlannerError(f"{path}: field 'name': expected a non-empty string, got {shown_value(name)}")
    return name


def _cluster_profile(prof: object, path: Path) -> HardwareProfile:
    """A cluster file's ``profile``: an inline profile mapping, a catalog name, or a path relative
    to the file; an error names the file and the field, not just the value."""
    where = f"{path}: field 'profile'"
    if isinstance(prof, dict):
        return with_calibration_of(validate_as(HardwareProfile, prof, f"{path}: profile"), f"{path}: profile")
    if not isinstance(prof, str) or not prof.strip():
        raise PlannerError(
            f"{where}: expected a hardware profile name, a path to a profile YAML or a profile mapping, "
            f"got {shown_value(prof)}"
        )
    if _looks_like_path(prof):
        return load_profile(path.parent / prof)
    if prof.lower() not in _profile_files():
        unknown = _unknown("hardware profile", shown(prof), profile_names(), "see `plan list clusters`")
        raise PlannerError(f"{where}: {unknown}")
    return load_profile(prof)


def _catalog_profile_of(key: str) -> str | None:
    """The catalog profile a cluster name ``<profile>`` or ``<profile>x<N>`` names (None: another name)."""
    if key in _profile_files():
        return key
    match = CLUSTER_NAME.match(key)
    return match["profile"] if match and match["profile"] in _profile_files() else None


def _recounted(cluster: ClusterSpec, profile_key: str | None) -> ClusterSpec:
    """A catalog cluster renamed for the node count it has after ``--nodes`` / ``--gpus``
    (``dgx-h100x2 --nodes 16`` is dgx-h100x16, not "dgx-h100x2: 16 nodes"), and for its GPUs where
    they do not fill the nodes (``CLUSTER_NAME``'s dgx-h100x2-12gpus); a file's own name stays."""
    if profile_key is None:
        return cluster
    name = f"{profile_key}x{cluster.num_nodes}"
    if cluster.num_gpus != cluster.num_nodes * cluster.gpus_per_node:
        name += f"-{cluster.num_gpus}gpus"
    return cluster if name == cluster.name.lower() else cluster.model_copy(update={"name": name})


def load_cluster(
    name_or_path: str | Path | ClusterSpec, nodes: int | None = None, gpus: int | None = None
) -> ClusterSpec:
    """A cluster from ``<profile>``, ``<profile>x<N>``, a profile YAML or a cluster YAML.

    A cluster YAML has ``profile`` (a name, a path, or an inline profile mapping), ``num_nodes``
    and optionally ``num_gpus`` and ``name``. ``nodes`` and ``gpus`` override what the name says.
    """
    if isinstance(name_or_path, ClusterSpec):
        if nodes is None and gpus is None:
            # checked again, as a ModelSpec is: model_copy(update=...) skips the checks (num_gpus 64
            # on one 8-GPU node had been planned as dp 64)
            return validate_as(
                ClusterSpec, name_or_path.model_dump(warnings=False), f"cluster '{shown(name_or_path.name)}'"
            )
        cluster = _cluster(name_or_path.name, name_or_path.profile, nodes, gpus, name_or_path.name)
        return _recounted(cluster, _catalog_profile_of(name_or_path.name.lower()))
    text = _name_text(name_or_path, "cluster", "ClusterSpec")
    path = Path(text).expanduser()
    if _looks_like_path(text):
        if not _is_file(path, text, "cluster"):
            raise PlannerError(f"cluster file '{shown(text)}' {_not_a_file(path, 'a YAML file')}")
        data = read_yaml(path)
        if "profile" not in data:
            profile = with_calibration_of(validate_as(HardwareProfile, data, str(path)), str(path))
            return _cluster(path.stem, profile, nodes, gpus, str(path))
        unknown = sorted(set(data) - {"name", "profile", "num_nodes", "num_gpus"}, key=str)
        if unknown:
            raise PlannerError(
                f"{path}: field {shown_value(unknown[0])}: unknown key (allowed: name, profile, num_nodes, num_gpus)"
            )
        return _cluster(
            _cluster_name(data, path),
            _cluster_profile(data["profile"], path),
            nodes if nodes is not None else data.get("num_nodes"),
            gpus if gpus is not None else data.get("num_gpus"),
            str(path),
        )
    key = text.lower()
    hint = "use <profile> or <profile>x<nodes>, see `plan list clusters`"
    if key in _profile_files():
        cluster = _cluster(text, load_profile(key), nodes, gpus, text)
        return _recounted(cluster, key) if nodes is not None or gpus is not None else cluster
    if len(text) > 200:
        raise PlannerError(f"unknown cluster '{shown(text)}': names are short; {hint}")
    match = CLUSTER_NAME.match(key)
    if match and match["profile"] in _profile_files():
        count = int(match["nodes"])
        if count < 1:
            raise PlannerError(f"cluster '{text}': node count must be at least 1")
        if match["gpus"] is not None and nodes is None and gpus is None:  # both of the name's counts
            nodes, gpus = count, int(match["gpus"])
        # --gpus alone re-derives the node count; --nodes wins over the name's count (over both of them).
        named = count if gpus is None else None
        cluster = _cluster(text, load_profile(match["profile"]), nodes if nodes is not None else named, gpus, text)
        return _recounted(cluster, match["profile"])
    known = profile_names() + [f"{p}x16" for p in profile_names()]
    raise _unknown("cluster", text, known, hint)


# ---- software stacks ---------------------------------------------------------------------------
DEFAULT_STACK = "megatron-core"
"""The stack a plan assumes unless ``--stack`` says otherwise: Megatron-Core, what NeMo and
Megatron-Bridge run and what most large published runs use."""


def _stack_files() -> dict[str, Path]:
    return _files_by_stem("stacks")


def stack_names() -> list[str]:
    return sorted(_stack_files())


@cached_per_file_stamp
def _load_stack_file(path: Path) -> Stack:
    return validate_as(Stack, read_yaml(path), str(path))


def load_stack(name_or_path: str | Path | Stack) -> Stack:
    """A software stack from a catalog name (``plan list stacks``) or a YAML path."""
    if isinstance(name_or_path, Stack):
        return name_or_path
    text = _name_text(name_or_path, "stack", "Stack")
    if _looks_like_path(text):
        return _resolve(text, "stack", _stack_files(), _load_stack_file, "see `plan list stacks`")
    # A name resolves against the working directory first (a file of that name), so its stack is
    # kept per directory: the search asks for the job's stack some 300 times (JobSpec.software).
    return _stack_named(text, os.getcwd())


@lru_cache(maxsize=64)
def _stack_named(text: str, cwd: str) -> Stack:
    return _resolve(text, "stack", _stack_files(), _load_stack_file, "see `plan list stacks`")


def list_stacks() -> list[Stack]:
    return [load_stack(name) for name in stack_names()]

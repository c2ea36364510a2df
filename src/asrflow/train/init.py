"""Starting a run from existing weights (fine-tuning): ``runs.<run>.init``.

The source is an exported model package (a directory with ``config.yaml`` and a ``.pth`` file, as
ESPnet's ``Speech2Text`` loads them; asrflow's ``package.json`` records the weights' SHA-256, which
is checked, and an unpacked ESPnet model-zoo package names its weights in ``meta.yaml``), an ESPnet
experiment directory (``exp/asr_*/``), a plain state-dict ``.pth`` or a Lightning checkpoint of an
earlier asrflow run. Parameter keys are chosen with fnmatch patterns::

    init:
      model: exp/asr_base/
      include: ["encoder.*", "frontend.*", "normalize.*"]
      exclude: ["ctc.*", "decoder.*"]

Every chosen key must exist in the new model with the same shape, and every model key the patterns
choose must be in the file (else it would keep its random start unnoticed); anything else is an
:class:`InitMismatch` that lists the keys (a few of each kind) with their shapes, unless left out
by the patterns. ESPnet's own loader uses ``strict=False`` and silently ignores keys that do not
match (a ``model.`` prefix left over from Lightning loads nothing and decodes garbage), so after
loading, every chosen tensor is compared with its source.

This module imports torch lazily: :func:`find_weights` is cheap enough for a Snakemake input
function.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from asrflow.checkpoints import load_model_state
from asrflow.errors import AsrflowError
from asrflow.hashing import sha256_file
from asrflow.types import Pathlike

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

PACKAGE_MANIFEST = "package.json"
"""asrflow's exported package (:mod:`asrflow.export.package`): ``files`` maps each file name to
its SHA-256; the one ``.pth`` among them is the weights, checked against its digest."""
MANIFESTS = ("meta.yaml", "meta.yml")
"""ESPnet's ``pack`` manifest: ``files.asr_model_file`` and ``yaml_files.asr_train_config``,
relative to the package directory."""
MANIFEST_WEIGHTS_KEY = "asr_model_file"
MANIFEST_CONFIG_KEY = "asr_train_config"
WEIGHTS_PATTERNS = ("model.pth", "valid.acc.ave.pth", "*.ave*.pth", "valid.*best*.pth", "*.pth")
"""Weights looked for in a directory without a manifest, in this order; the first pattern that
matches exactly one file (symlinks to the same file count once) wins."""
DEFAULT_INCLUDE = ("*",)
DEFAULT_EXCLUDE: tuple[str, ...] = ()


@dataclass(frozen=True)
class InitConfig:
    """``runs.<run>.init`` of the config (defaults as in the schema)."""

    model: str
    include: tuple[str, ...] = DEFAULT_INCLUDE
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    reuse_tokenizer: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InitConfig:
        unknown = set(d) - {"model", "include", "exclude", "reuse_tokenizer"}
        if unknown:
            raise AsrflowError(
                f"init: unknown key(s) {', '.join(sorted(unknown))}; "
                "allowed: model, include, exclude, reuse_tokenizer"
            )
        if not d.get("model"):
            raise AsrflowError("init: 'model' is required (a package, ESPnet model dir or .pth)")
        include = d.get("include")
        exclude = d.get("exclude")
        return cls(
            model=str(d["model"]),
            include=tuple(DEFAULT_INCLUDE if include is None else include),
            exclude=tuple(DEFAULT_EXCLUDE if exclude is None else exclude),
            reuse_tokenizer=bool(d.get("reuse_tokenizer", False)),
        )


# --- finding the files ---------------------------------------------------------------------


def _read_manifest(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise AsrflowError(f"{path}: not a readable package manifest: {exc}") from None
    if not isinstance(data, dict):
        raise AsrflowError(f"{path}: a package manifest must be a mapping")
    return data


def _package_weights(directory: Path) -> tuple[Path, Path, str] | None:
    """``(package.json, weights, recorded sha256)`` of an asrflow package, else None."""
    manifest = directory / PACKAGE_MANIFEST
    if not manifest.is_file():
        return None
    files = _read_manifest(manifest).get("files")
    pths = sorted(n for n in files or {} if isinstance(n, str) and n.endswith(".pth"))
    if not isinstance(files, Mapping) or len(pths) != 1:
        raise AsrflowError(
            f"{manifest}: expected 'files' to list exactly one .pth weights file, found "
            f"{pths or 'none'}; re-export the package"
        )
    return manifest, directory / pths[0], str(files[pths[0]])


def _manifest_entry(directory: Path, key: str) -> tuple[Path, Path] | None:
    """``(meta.yaml, file)`` for ``key`` of an ESPnet package (under ``files``/``yaml_files``)."""
    for name in MANIFESTS:
        manifest = directory / name
        if not manifest.is_file():
            continue
        data = _read_manifest(manifest)
        for section in (data.get("files"), data.get("yaml_files"), data):
            if isinstance(section, Mapping) and isinstance(section.get(key), str):
                return manifest, directory / section[key]
    return None


def _unique_files(paths: Sequence[Path]) -> list[Path]:
    """Files among ``paths``, one per real file (ESPnet links valid.acc.ave.pth to a *best)."""
    seen: dict[Path, Path] = {}
    for p in sorted(paths):
        if p.is_file():
            seen.setdefault(p.resolve(), p)
    return sorted(seen.values())


def find_weights(model_path: Pathlike) -> Path:
    """The weights file of a package or model directory, or ``model_path`` itself if a file.

    In a directory: the file its manifest names (asrflow's ``package.json``: its one ``.pth``;
    ESPnet's ``meta.yaml``: ``files.asr_model_file``), else the first of
    :data:`WEIGHTS_PATTERNS` that matches exactly one file. Example::

        find_weights("exp/asr_conformer")  # -> exp/asr_conformer/valid.acc.ave.pth
    """
    path = Path(model_path)
    if path.is_file():
        return path
    if not path.exists():
        raise AsrflowError(
            f"init.model {str(path)!r} does not exist; give an exported package directory, an "
            "ESPnet model directory or a .pth/.ckpt file"
        )
    entry = _package_weights(path) or _manifest_entry(path, MANIFEST_WEIGHTS_KEY)
    if entry is not None:
        manifest, weights = entry[:2]
        if not weights.is_file():
            raise AsrflowError(f"{manifest} names weights {str(weights)!r}, which do not exist")
        return weights
    for pattern in WEIGHTS_PATTERNS:
        found = _unique_files(list(path.glob(pattern)))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise AsrflowError(
                f"init.model {str(path)!r}: {len(found)} weight files match {pattern!r} "
                f"({names}); name the one to start from in init.model"
            )
    present = sorted(p.name for p in path.iterdir())
    listing = ", ".join(present[:20]) + (" ..." if len(present) > 20 else "") or "nothing"
    raise AsrflowError(
        f"init.model {str(path)!r}: no weights file found (looked for a manifest "
        f"{'/'.join((PACKAGE_MANIFEST, *MANIFESTS))} and {', '.join(WEIGHTS_PATTERNS)}); "
        f"the directory holds: {listing}"
    )


def tracked_weights(model_path: Pathlike) -> str:
    """What a rule declares as input for ``init.model``: its weights file when it exists, else
    the path as given (so Snakemake finds the rule that makes it, or reports it missing)."""
    return str(find_weights(model_path)) if Path(model_path).exists() else str(model_path)


def find_config(model_path: Pathlike) -> Path | None:
    """The ESPnet training config (``config.yaml``) that goes with a package, dir or .pth."""
    path = Path(model_path)
    directory = path if path.is_dir() else path.parent
    if path.is_dir():
        entry = _manifest_entry(path, MANIFEST_CONFIG_KEY)
        if entry is not None and entry[1].is_file():
            return entry[1]
    for candidate in (directory / "config.yaml", find_weights(path).parent / "config.yaml"):
        if candidate.is_file():
            return candidate
    return None


# --- the token list --------------------------------------------------------------------------


def read_token_list(config_yaml: Pathlike) -> list[str]:
    """``token_list`` of an ESPnet config: a list, or a path to a tokens file."""
    config = yaml.safe_load(Path(config_yaml).read_text(encoding="utf-8")) or {}
    tokens = config.get("token_list")
    if isinstance(tokens, str):
        tokens_path = Path(tokens)
        if not tokens_path.is_absolute() and not tokens_path.is_file():
            tokens_path = Path(config_yaml).parent / tokens_path
        if not tokens_path.is_file():
            raise AsrflowError(f"{config_yaml}: token_list file {tokens!r} does not exist")
        tokens = tokens_path.read_text(encoding="utf-8").splitlines()
    if not isinstance(tokens, list) or not tokens:
        raise AsrflowError(f"{config_yaml}: no token_list")
    return [str(t).rstrip("\n") for t in tokens if str(t).strip()]


def check_token_list(model_path: Pathlike, tokens_txt: Pathlike) -> None:
    """The run's ``tokens.txt`` must equal the package's token list (``reuse_tokenizer``)."""
    config = find_config(model_path)
    if config is None:
        raise AsrflowError(
            f"init.reuse_tokenizer: {str(model_path)!r} has no config.yaml with a token_list to "
            "compare the run's tokens.txt with"
        )
    theirs = read_token_list(config)
    with open(tokens_txt, encoding="utf-8") as f:
        ours = [line.rstrip("\n") for line in f if line.strip()]
    if ours == theirs:
        return
    first = next(
        (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
        min(len(ours), len(theirs)),
    )

    def at(tokens: list[str]) -> str:
        return repr(tokens[first]) if first < len(tokens) else "(end)"

    raise AsrflowError(
        f"init.reuse_tokenizer: the run's token list {tokens_txt} ({len(ours)} tokens) differs "
        f"from the package's {config} ({len(theirs)} tokens) at entry {first}: {at(ours)} vs "
        f"{at(theirs)}; train the run with the package's tokenizer, or set reuse_tokenizer: false "
        "and exclude the output layers (ctc.*, decoder.*)"
    )


# --- applying --------------------------------------------------------------------------------


def _matches(key: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def _prefixes(keys: Sequence[str]) -> str:
    """``encoder.*, ctc.*`` for a list of keys (their first components, in order)."""
    return ", ".join(dict.fromkeys(f"{k.split('.', 1)[0]}.*" for k in keys)) or "none"


def select_keys(
    state: Mapping[str, Any], include: Sequence[str], exclude: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(selected, skipped)`` keys of ``state``: matching an include and no exclude pattern."""
    selected = [k for k in state if _matches(k, include) and not _matches(k, exclude)]
    chosen = set(selected)
    return selected, [k for k in state if k not in chosen]


class InitMismatch(AsrflowError):
    """``init`` weights that do not fit the run's model: keys missing, unexpected or mis-shaped."""


MAX_LISTED = 5
"""Keys of each kind an :class:`InitMismatch` lists (then "and N more")."""


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(tensor.shape)


def _listing(items: Sequence[str]) -> str:
    more = f", and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return ", ".join(items[:MAX_LISTED]) + more


def check_fit(
    state: Mapping[str, Any],
    target: Mapping[str, Any],
    selected: Sequence[str],
    cfg: InitConfig,
    weights: Path,
) -> None:
    """Raise :class:`InitMismatch` unless the ``selected`` keys of ``state`` fit ``target``.

    Three ways not to fit, all listed (a few keys of each, with shapes): a selected key the
    model lacks; a selected key whose shape differs; a model key that the include/exclude
    patterns select but the file lacks (it would silently keep its random start).
    """
    unexpected = [k for k in selected if k not in target]
    misshaped = [k for k in selected if k in target and _shape(state[k]) != _shape(target[k])]
    missing = [
        k
        for k in target
        if k not in state and _matches(k, cfg.include) and not _matches(k, cfg.exclude)
    ]
    if not (unexpected or misshaped or missing):
        return
    problems = []
    if unexpected:
        keys = [f"{k!r} {_shape(state[k])}" for k in unexpected]
        problems.append(f"{len(unexpected)} key(s) the model lacks: {_listing(keys)}")
    if misshaped:
        keys = [f"{k!r} {_shape(state[k])} vs {_shape(target[k])}" for k in misshaped]
        problems.append(
            f"{len(misshaped)} shape mismatch(es), the file's shape vs the model's: "
            f"{_listing(keys)}"
        )
    if missing:
        keys = [f"{k!r} {_shape(target[k])}" for k in missing]
        problems.append(
            f"{len(missing)} model key(s) selected by include {list(cfg.include)} and exclude "
            f"{list(cfg.exclude)} that the file lacks: {_listing(keys)}"
        )
    differing = _prefixes([*unexpected, *misshaped, *missing])
    raise InitMismatch(
        f"init: {weights} (init.model {cfg.model!r}) does not fit the run's model: "
        + "; ".join(problems)
        + f". Exclude the keys that differ in the run's init.exclude (they start with "
        f"{differing}; another vocabulary needs exclude: [ctc.*, decoder.*]) or make the "
        "recipe's model section match the one the weights were trained with"
    )


def apply_init(
    model: torch.nn.Module, init_cfg: Mapping[str, Any], *, tokens: Pathlike | None = None
) -> dict[str, Any]:
    """Load ``init_cfg``'s weights into ``model`` (in place) and return the record of it.

    ``tokens`` is the run's ``tokens.txt``, needed when ``reuse_tokenizer`` is true. The record:
    ``model``, ``weights`` (the file), ``weights_sha256``, ``loaded_keys``, ``skipped_keys``
    (file keys left out by the patterns), ``fresh_keys`` (model keys not loaded), ``include``,
    ``exclude``, ``reuse_tokenizer``.
    """
    import torch

    cfg = InitConfig.from_dict(init_cfg)
    weights = find_weights(cfg.model)
    if cfg.reuse_tokenizer:
        if tokens is None:
            raise AsrflowError("init.reuse_tokenizer is true but no run token list was given")
        check_token_list(cfg.model, tokens)
    digest = sha256_file(weights)
    package = _package_weights(Path(cfg.model)) if Path(cfg.model).is_dir() else None
    if package is not None and package[2] != digest:
        raise AsrflowError(
            f"{weights}: its SHA-256 differs from the one in {package[0]}; the package was "
            "modified after export, re-export it"
        )
    state = load_model_state(weights)
    selected, skipped = select_keys(state, cfg.include, cfg.exclude)
    for pattern in cfg.include:
        if not any(fnmatch.fnmatchcase(k, pattern) for k in state):
            log.warning("init: include pattern %r matches no key of %s", pattern, weights)
    if not selected:
        raise AsrflowError(
            f"init: no key of {weights} is selected by include {list(cfg.include)} and exclude "
            f"{list(cfg.exclude)}; its keys start with {_prefixes(list(state))}"
        )
    target = model.state_dict()
    check_fit(state, target, selected, cfg, weights)
    chosen = {k: state[k] for k in selected}
    result = model.load_state_dict(chosen, strict=False)
    if result.unexpected_keys:  # checked above; here for safety
        raise AsrflowError(f"init: the model did not take {result.unexpected_keys[:5]}")
    loaded = model.state_dict()
    for key in selected:
        got = loaded[key]
        if not torch.equal(got.detach().cpu(), state[key].to(dtype=got.dtype)):
            raise AsrflowError(
                f"init: {key!r} from {weights} did not arrive in the model (loaded tensor differs "
                "from the file); the weights were not applied"
            )
    chosen_keys = set(selected)
    fresh = [k for k in loaded if k not in chosen_keys]
    record = {
        "model": str(cfg.model),
        "weights": str(weights),
        "weights_sha256": digest,
        "loaded_keys": len(selected),
        "skipped_keys": len(skipped),
        "fresh_keys": len(fresh),
        "include": list(cfg.include),
        "exclude": list(cfg.exclude),
        "reuse_tokenizer": cfg.reuse_tokenizer,
    }
    numel = sum(state[k].numel() for k in selected)
    log.info(
        "init from %s (sha256 %s): loaded %d tensors (%.2f M values; %s), skipped %d of the "
        "file (%s), left %d model tensors fresh (%s)",
        weights,
        record["weights_sha256"][:12],
        len(selected),
        numel / 1e6,
        _prefixes(selected),
        len(skipped),
        _prefixes(skipped),
        len(fresh),
        _prefixes(fresh),
    )
    return record

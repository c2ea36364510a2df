"""Finding an ESPnet model's files (its weights, its training config and its token list) and
reading what its config says the frontend expects (:func:`model_sample_rate`).

A model given as ``runs.<run>.init.model`` may be an asrflow package (``package.json`` lists each
file's SHA-256; the weights are checked against it), an unpacked ESPnet model-zoo package
(``meta.yaml`` names the weights and config), an ESPnet experiment directory, or a single
``.pth``/``.ckpt`` file. Torch-free: a Snakemake input function calls :func:`tracked_weights`
while the DAG is built; :mod:`asrflow.train.init.weights` loads what these find.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

PACKAGE_MANIFEST = "package.json"
"""asrflow's exported package (:mod:`asrflow.export.package`): ``files`` maps each file name to
its SHA-256; the one ``.pth`` among them is the weights, checked against its digest."""
PACKAGE_CONTENTS = ("config.yaml", "model.pth", "bpe.model", "tokens.txt")
"""The files of a package whose SHA-256 its manifest records (everything but itself)."""
PACKAGE_FILES = (*PACKAGE_CONTENTS, PACKAGE_MANIFEST)
"""Every file of an exported package: what ``publish_selected`` copies for a child run."""
PACKAGE_ADAPTER = "adapter.pth"
"""A LoRA run's adapter-only export, beside the merged weights (:mod:`asrflow.export.adapter`);
``publish_selected`` copies it too where there is one."""
MANIFESTS = ("meta.yaml", "meta.yml")
"""ESPnet's ``pack`` manifest: ``files.asr_model_file`` and ``yaml_files.asr_train_config``,
relative to the package directory."""
MANIFEST_WEIGHTS_KEY = "asr_model_file"
MANIFEST_CONFIG_KEY = "asr_train_config"
WEIGHTS_PATTERNS = ("model.pth", "valid.acc.ave.pth", "*.ave*.pth", "valid.*best*.pth", "*.pth")
"""Weights looked for in a directory without a manifest, in this order; the first pattern that
matches exactly one file (symlinks to the same file count once) wins."""


def _read_manifest(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise AsrflowError(f"{path}: not a readable package manifest: {exc}") from None
    if not isinstance(data, dict):
        raise AsrflowError(f"{path}: a package manifest must be a mapping")
    return data


def package_weights(directory: Path) -> tuple[Path, Path, str] | None:
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
    entry = package_weights(path) or _manifest_entry(path, MANIFEST_WEIGHTS_KEY)
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
    if (directory / "config.yaml").is_file():
        return directory / "config.yaml"
    beside_weights = find_weights(path).parent / "config.yaml"
    return beside_weights if beside_weights.is_file() else None


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


def model_sample_rate(frontend_conf: Mapping[str, Any] | None) -> int:
    """The sampling rate the model's frontend expects: ESPnet's ``frontend_conf.fs`` (an integer
    or, as ESPnet's frontends accept it, a size such as ``"16k"``), 16000 when not given."""
    fs = (frontend_conf or {}).get("fs", 16000)
    if isinstance(fs, str):
        text = fs.strip().lower()
        scale = 1000 if text.endswith("k") else 1
        try:
            return int(float(text.rstrip("k")) * scale)
        except ValueError:
            raise AsrflowError(
                f"frontend_conf.fs: {fs!r} is not a sampling rate (write 16000 or 16k)"
            ) from None
    return int(fs)

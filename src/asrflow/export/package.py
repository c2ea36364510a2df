"""Model packages: a directory that ESPnet's own ``Speech2Text`` loads, with its checksums.

A package holds::

    config.yaml     ESPnet's training config (the parsed ``ASRTask`` arguments, token list inline)
    model.pth       the ESPnet model's own state dict (no Lightning ``model.`` prefix), loadable
                    with ``torch.load(weights_only=True)``
    bpe.model       the SentencePiece model
    tokens.txt      the token list (the same list as in config.yaml)
    package.json    artifact name, SHA-256 of the four files above, the source checkpoint,
                    package versions and the caller's provenance mapping
    adapter.pth     (runs with LoRA adapters only) the adapter-only export: what the run changed
                    of its start weights, and their SHA-256 (:mod:`asrflow.export.adapter`)

Plain ESPnet loads it::

    from espnet2.bin.asr_inference import Speech2Text
    s2t = Speech2Text("pkg/config.yaml", "pkg/model.pth", ctc_weight=1.0)   # CTC-only model
    text = s2t(audio)[0][0]

**Where the BPE model is found.** ESPnet opens ``bpemodel`` from config.yaml as written,
relative to the *working directory*, not to the config's folder. The exported config therefore
holds the package's absolute ``bpe.model`` path at export time, so the plain call above works from
any directory while the package stays where it was written. A package that was moved or copied
must be loaded with :func:`load_speech2text`, which hands ESPnet the package's own ``bpe.model``
(``Speech2Text``'s ``bpemodel`` argument overrides the config's), so the stale path in
config.yaml is never opened.

**Why the weights are checked here.** ESPnet loads ``model.pth`` with ``strict=False``: a state
dict whose keys still carry a ``model.`` prefix loads without a word and decodes garbage.
:func:`export_package` refuses any state dict that does not match, key for key and shape for
shape, the model that config.yaml builds, and reloads what it wrote strictly before the package
appears.

Writes are whole-or-absent and content-stable: the package is assembled in a temporary directory
beside ``out_dir`` and renamed into place; if ``out_dir`` already holds exactly the same files,
it is left untouched (mtimes included). A disk that fills during the export raises
:class:`~asrflow.io.WriteFailed`; the half-built directory is removed and ``out_dir`` keeps what it
held.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import yaml

from asrflow.checkpoints import read_model_state
from asrflow.errors import AsrflowError
from asrflow.espnet_import import espnet_import
from asrflow.export.adapter import write_adapter
from asrflow.export.espnet_model import (
    build_espnet_model,
    check_state_dict,
    espnet_config,
    yaml_text,
)
from asrflow.export.find import PACKAGE_CONTENTS, PACKAGE_MANIFEST
from asrflow.hashing import sha256_file
from asrflow.io import dumps_json, is_write_failure, publish_dir, write_failed
from asrflow.tokens import TokenEncoder
from asrflow.types import Pathlike

if TYPE_CHECKING:
    from espnet2.bin.asr_inference import Speech2Text

log = logging.getLogger(__name__)

SCHEMA = "asrflow.package/1"
FILES = CONFIG, MODEL, BPE_MODEL, TOKENS = PACKAGE_CONTENTS
"""The files whose SHA-256 ``package.json`` records (everything but itself)."""
MANIFEST = PACKAGE_MANIFEST

VERSIONED_PACKAGES = ("espnet", "torch", "sentencepiece")


# -- export ---------------------------------------------------------------------------------------
def export_package(
    *,
    state_dict_or_checkpoint: Pathlike,
    espnet_args: Mapping[str, Any] | argparse.Namespace,
    bpe_model: Pathlike,
    tokens_txt: Pathlike,
    out_dir: Pathlike,
    artifact: str,
    provenance: Mapping[str, Any] | None = None,
    base_model: Pathlike | None = None,
) -> dict[str, Any]:
    """Write the package ``out_dir`` (see the module docstring); returns its ``package.json``.

    ``state_dict_or_checkpoint`` is a Lightning checkpoint of an ``AsrModule`` (its
    ``state_dict``'s ``model.*`` entries are the ESPnet model), ESPnet's training
    ``checkpoint.pth`` or a plain state dict of the ESPnet model, as
    :func:`asrflow.checkpoints.read_model_state` reads them; the kind is recorded as
    ``source.format``. ``espnet_args`` are ESPnet's parsed arguments
    (:func:`asrflow.train.loop.model.build_model`'s second result, or the run's
    ``artifacts/espnet_config.json``). ``bpe_model`` and ``tokens_txt`` must be the pair the model
    was trained with. ``base_model``: the ``model.pth`` a run with LoRA adapters started from;
    the package then also holds the adapter-only export (:mod:`asrflow.export.adapter`).

    Example::

        export_package(
            state_dict_or_checkpoint="results/runs/r1/checkpoints/last.ckpt",
            espnet_args=json.loads(Path("results/runs/r1/espnet_config.json").read_text()),
            bpe_model="results/tok/bpe.model", tokens_txt="results/tok/tokens.txt",
            out_dir="results/packages/r1", artifact="r1-last",
        )
    """
    source = Path(state_dict_or_checkpoint)
    out = Path(out_dir).absolute()
    TokenEncoder(bpe_model, tokens_txt)  # refuses a model/list pair that do not belong together
    tokens = Path(tokens_txt).read_text(encoding="utf-8").splitlines()
    config = espnet_config(espnet_args, tokens, out / BPE_MODEL)
    config_text = yaml_text(config)
    model = build_espnet_model(yaml.safe_load(config_text))
    weights, source_format = _checked_weights(source, model)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        _write_files(tmp, config_text, weights, bpe_model, tokens_txt)
        _check_reload(tmp / MODEL, model)
        manifest = _manifest(tmp, artifact, source, source_format, model, config, provenance)
        if base_model is not None:
            manifest["adapter"] = write_adapter(tmp, weights, base_model)
        (tmp / MANIFEST).write_text(dumps_json(manifest), encoding="utf-8")
        if not publish_dir(tmp, out):
            log.info("%s already holds this package; left untouched", out)
    except Exception as exc:
        if is_write_failure(exc):  # the disk filled: the half-built package goes, out stays
            raise write_failed(
                out, exc, kept="keeps the package it held before", absent="was not published"
            ) from exc
        raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    log.info(
        "exported %s (%s, %s parameters) from %s -> %s",
        artifact,
        source_format,
        f"{manifest['num_parameters']:,}",
        source,
        out,
    )
    return manifest


def _checked_weights(source: Path, model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], str]:
    """The ESPnet weights in ``source``, checked against ``model`` (:func:`check_state_dict`),
    and the source's format."""
    state, source_format = read_model_state(source)
    reference = model.state_dict()
    check_state_dict(state, reference, source=source)
    # the reference's key order, contiguous copies: the same weights always give the same bytes
    weights = {
        k: state[k].detach().cpu().clone(memory_format=torch.contiguous_format) for k in reference
    }
    return weights, source_format


def _write_files(
    tmp: Path,
    config_text: str,
    weights: Mapping[str, torch.Tensor],
    bpe_model: Pathlike,
    tokens_txt: Pathlike,
) -> None:
    """Write the package's :data:`FILES` into ``tmp``."""
    (tmp / CONFIG).write_text(config_text, encoding="utf-8")
    torch.save(weights, tmp / MODEL)
    shutil.copyfile(bpe_model, tmp / BPE_MODEL)
    shutil.copyfile(tokens_txt, tmp / TOKENS)


def _manifest(
    tmp: Path,
    artifact: str,
    source: Path,
    source_format: str,
    model: torch.nn.Module,
    config: Mapping[str, Any],
    provenance: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``package.json`` for the files written in ``tmp``."""
    return {
        "schema": SCHEMA,
        "artifact": artifact,
        "files": {name: sha256_file(tmp / name) for name in FILES},
        "source": {
            "path": str(source),
            "sha256": sha256_file(source),
            "format": source_format,
        },
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "ctc_only": is_ctc_only(config),
        "versions": _versions(),
        "provenance": dict(provenance or {}),
    }


def is_ctc_only(config: Mapping[str, Any]) -> bool:
    """True when the model decodes with CTC alone (no decoder, or model_conf.ctc_weight 1)."""
    model_conf = config.get("model_conf") or {}
    return config.get("decoder") in (None, "none") or model_conf.get("ctc_weight") == 1.0


def _check_reload(model_file: Path, model: torch.nn.Module) -> None:
    """Load what was written the way ESPnet will, but strictly."""
    state = torch.load(model_file, map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


# -- loading and checking -------------------------------------------------------------------------
def verify_package(package_dir: Pathlike) -> dict[str, Any]:
    """Re-hash a package's files against its ``package.json``; returns the manifest.

    Raises :class:`AsrflowError` naming the first missing or changed file.
    """
    package = Path(package_dir)
    manifest_path = package / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AsrflowError(f"{manifest_path}: not a readable package manifest ({exc})") from exc
    files = dict(manifest.get("files", {}))
    if manifest.get("adapter"):  # the adapter-only export beside the merged weights
        files[manifest["adapter"]["file"]] = manifest["adapter"]["sha256"]
    for name, expected in sorted(files.items()):
        path = package / name
        if not path.is_file():
            raise AsrflowError(f"{package}: package file {name} is missing; re-export it")
        if sha256_file(path) != expected:
            raise AsrflowError(
                f"{path}: its SHA-256 differs from {MANIFEST}; the package was modified, "
                "re-export it"
            )
    return manifest


def load_speech2text(
    package_dir: Pathlike,
    *,
    device: str = "cpu",
    ctc_weight: float | None = None,
    beam_size: int = 20,
    verify: bool = True,
    **kwargs: Any,
) -> Speech2Text:
    """ESPnet's ``Speech2Text`` for a package, wherever the package now lies.

    ``ctc_weight`` defaults to 1.0 for CTC-only models (ESPnet's default of 0.5 gives garbage
    there: half the score goes to a decoder that does not exist) and to ESPnet's 0.5 otherwise.
    ``beam_size`` is capped at the number of tokens other than ``<blank>``: with tiny
    vocabularies a wider beam makes ESPnet fail (wider than the vocabulary) or return empty
    transcripts (exactly as wide, measured with espnet 202611). ``bpemodel`` defaults to the
    package's own ``bpe.model`` (see the module docstring); other ``kwargs`` go to
    ``Speech2Text`` as they are. With ``verify``, the files are checked against ``package.json``
    first.

    Example::

        s2t = load_speech2text("results/packages/r1")
        text, *_ = s2t(audio_16k)[0]
    """
    with espnet_import():  # ESPnet's inference stack only where a package is loaded
        from espnet2.bin.asr_inference import Speech2Text

    package = Path(package_dir).absolute()
    if verify:
        verify_package(package)
    config_file = package / CONFIG
    with open(config_file, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    ctc_only = is_ctc_only(config)
    if ctc_weight is None:
        ctc_weight = 1.0 if ctc_only else 0.5
    elif ctc_only and ctc_weight != 1.0:
        raise AsrflowError(
            f"{package}: a CTC-only model decodes with ctc_weight=1.0, not {ctc_weight}"
        )
    # ESPnet's first search step ranks the tokens of one hypothesis: a beam wider than the
    # vocabulary fails there, and one that takes in the blank (scored -1e10 by the CTC prefix
    # scorer) returns empty transcripts. Keep it to the tokens other than the blank.
    widest = len(config.get("token_list") or ()) - 1
    if widest > 0 and beam_size > widest:
        log.info("beam_size %d capped at %d, the tokens other than <blank>", beam_size, widest)
        beam_size = widest
    kwargs.setdefault("bpemodel", str(package / BPE_MODEL))
    return Speech2Text(
        asr_train_config=config_file,
        asr_model_file=package / MODEL,
        device=device,
        ctc_weight=ctc_weight,
        beam_size=beam_size,
        **kwargs,
    )

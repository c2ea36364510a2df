"""One function per model-choosing rule (files in, files out): average, export.

Artifact names of a run (``runs.<run>`` with its recipe's ``best_model_criterion``):

- ``baseline``: the start weights of a fine-tuning run (``runs.<run>.init``), exported with the
  init model's own config, vocabulary and BPE model, so the report shows what fine-tuning gained;
  only when the init model comes with its ESPnet ``config.yaml`` (a package or an ESPnet model
  directory; a bare ``.pth``/``.ckpt`` has no model description to export);
- ``last``: the last checkpoint;
- ``<monitor>.best`` (``valid.loss.best``): the best single checkpoint by that criterion;
- ``<monitor>.ave_<k>best`` (``valid.loss.ave_3best``, ESPnet3's name): the float64 average of
  the criterion's top-k checkpoints.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from asrflow.artifacts import BASELINE, CHECKPOINTS, LAST, LAST_CHECKPOINT, best_name, is_average
from asrflow.errors import AsrflowError
from asrflow.export.find import find_config, find_weights, read_token_list
from asrflow.export.package import export_package
from asrflow.io import read_json
from asrflow.select.average import average_checkpoints, topk_checkpoints
from asrflow.types import Pathlike


def _summary(path: Pathlike) -> dict[str, Any]:
    summary = read_json(path)
    if summary.get("status") != "completed":
        raise AsrflowError(f"{path}: the run did not complete (status {summary.get('status')!r})")
    return summary


def average_run(
    summary_path: Pathlike, artifacts: Pathlike, monitor: str, k: int, out: Pathlike
) -> dict[str, Any]:
    """Average the ``k`` best checkpoints of a run by ``monitor`` into ``out``."""
    top = topk_checkpoints(_summary(summary_path), monitor)
    if len(top) != k:
        raise AsrflowError(
            f"{summary_path}: the run kept {len(top)} checkpoint(s) by {monitor}, the recipe asks "
            f"to average {k}: train longer (more validations) or lower that criterion's top_k"
        )
    paths = [Path(artifacts) / CHECKPOINTS / name for name, _ in top]
    return average_checkpoints(paths, out, monitor=monitor, k=k, scores=[s for _, s in top])


def artifact_source(
    artifact: str, summary_path: Pathlike, artifacts: Pathlike, averaged: Pathlike | None
) -> Path:
    """The checkpoint (or averaged weights) an artifact is exported from."""
    if artifact == LAST:
        return Path(artifacts) / CHECKPOINTS / LAST_CHECKPOINT
    if is_average(artifact):
        if averaged is None:
            raise AsrflowError(f"artifact {artifact}: no averaged weights given")
        return Path(averaged)
    summary = _summary(summary_path)
    for monitor, info in summary.get("criteria", {}).items():
        if artifact == best_name(monitor):
            return Path(artifacts) / CHECKPOINTS / info["best_model_path"]
    raise AsrflowError(
        f"unknown artifact {artifact!r} for {summary_path}; known: last, "
        + ", ".join(best_name(m) for m in summary.get("criteria", {}))
    )


def export_run_artifact(
    artifact: str,
    *,
    summary: Pathlike,
    artifacts: Pathlike,
    bpe_model: Pathlike,
    tokens: Pathlike,
    out_dir: Pathlike,
    averaged: Pathlike | None = None,
    init_weights: Pathlike | None = None,
) -> dict[str, Any]:
    """Export one artifact of a run as a package ESPnet's ``Speech2Text`` loads; for a run that
    trained LoRA adapters (``init.adapter``) from ``init_weights``, with the adapter-only export
    beside it (:mod:`asrflow.export.adapter`)."""
    source = artifact_source(artifact, summary, artifacts, averaged)
    trained = read_json(summary)
    adapted = bool((trained.get("init") or {}).get("adapter"))
    if adapted and init_weights is None:
        raise AsrflowError(
            f"{summary}: the run trained adapters, but its start weights were not given "
            "(rule export_artifact's input init_weights)"
        )
    espnet_args = json.loads((Path(artifacts) / "espnet_config.json").read_text(encoding="utf-8"))
    return export_package(
        state_dict_or_checkpoint=source,
        espnet_args=espnet_args,
        bpe_model=bpe_model,
        tokens_txt=tokens,
        out_dir=out_dir,
        artifact=artifact,
        provenance={
            "run_summary": str(summary),
            "source": str(source),
            # what the weights were trained from: the recipe, data, tokenizer and start weights
            "run_hashes": trained.get("hashes"),
        },
        base_model=init_weights if adapted else None,
    )


def _baseline_bpe(init_model: Path, config_file: Path, config: dict[str, Any]) -> Path:
    """The SentencePiece model of an init model: next to its config (asrflow packages), else
    the config's ``bpemodel`` as written or relative to the model directory."""
    candidates = [config_file.parent / "bpe.model"]
    written = config.get("bpemodel")
    if written:
        candidates += [Path(written), init_model / written, config_file.parent / written]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise AsrflowError(
        f"{config_file}: cannot find the BPE model of the init model (looked at "
        f"{', '.join(map(str, candidates))}); put its bpe.model next to config.yaml to "
        "evaluate the baseline"
    )


def export_baseline(init_model: Pathlike, out_dir: Pathlike) -> dict[str, Any]:
    """Export the start weights of a fine-tuning run as the ``baseline`` package: the init
    model's weights with its own ESPnet config, token list and BPE model."""
    model = Path(init_model)
    config_file = find_config(model)
    if config_file is None:
        raise AsrflowError(
            f"init.model {str(model)!r} has no ESPnet config.yaml next to its weights, so its "
            "baseline cannot be exported"
        )
    config = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    tokens = read_token_list(config_file)
    config["token_list"] = tokens
    with tempfile.TemporaryDirectory() as tmp:
        tokens_txt = Path(tmp) / "tokens.txt"
        tokens_txt.write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
        return export_package(
            state_dict_or_checkpoint=find_weights(model),
            espnet_args=config,
            bpe_model=_baseline_bpe(model, config_file, config),
            tokens_txt=tokens_txt,
            out_dir=out_dir,
            artifact=BASELINE,
            provenance={"init_model": str(model), "config": str(config_file)},
        )

"""One function per model-choosing rule (files in, files out): average, export.

Artifact names of a run (``runs.<run>`` with its recipe's ``best_model_criterion``):

- ``last``: the last checkpoint;
- ``<monitor>.best`` (``valid.loss.best``): the best single checkpoint by that criterion;
- ``<monitor>.ave_<k>best`` (``valid.loss.ave_3best``, ESPnet3's name): the float64 average of
  the criterion's top-k checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.export.package import export_package
from asrflow.select.average import average_checkpoints, average_name, topk_checkpoints
from asrflow.train.recipe import Criterion
from asrflow.train.runner import CHECKPOINTS, LAST, checkpoint_tag
from asrflow.types import Pathlike

BEST = "best"


def artifact_names(criteria: Sequence[Criterion]) -> list[str]:
    """Every artifact a run exports: last, the best and the average of each criterion."""
    names = ["last"]
    for c in criteria:
        names.append(f"{checkpoint_tag(c.monitor)}.{BEST}")
        if c.top_k > 1:
            names.append(average_name(c.monitor, c.top_k))
    return names


def _summary(path: Pathlike) -> dict[str, Any]:
    summary = json.loads(Path(path).read_text(encoding="utf-8"))
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
    if artifact == "last":
        return Path(artifacts) / CHECKPOINTS / LAST
    if ".ave_" in artifact:
        if averaged is None:
            raise AsrflowError(f"artifact {artifact}: no averaged weights given")
        return Path(averaged)
    summary = _summary(summary_path)
    for monitor, info in summary.get("criteria", {}).items():
        if artifact == f"{checkpoint_tag(monitor)}.{BEST}":
            return Path(artifacts) / CHECKPOINTS / info["best_model_path"]
    raise AsrflowError(
        f"unknown artifact {artifact!r} for {summary_path}; known: last, "
        + ", ".join(f"{checkpoint_tag(m)}.{BEST}" for m in summary.get("criteria", {}))
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
) -> dict[str, Any]:
    """Export one artifact of a run as a package ESPnet's ``Speech2Text`` loads."""
    source = artifact_source(artifact, summary, artifacts, averaged)
    espnet_args = json.loads((Path(artifacts) / "espnet_config.json").read_text(encoding="utf-8"))
    return export_package(
        state_dict_or_checkpoint=source,
        espnet_args=espnet_args,
        bpe_model=bpe_model,
        tokens_txt=tokens,
        out_dir=out_dir,
        artifact=artifact,
        provenance={"run_summary": str(summary), "source": str(source)},
    )

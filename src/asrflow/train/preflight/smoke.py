"""The smoke run before a long training run (a few steps, a validation, an export decoded by
ESPnet's ``Speech2Text``), so that a manifest, tokenizer, model or export mismatch fails in a
minute; the other job before it, the batch audit, is
:func:`asrflow.train.preflight.audit.audit_run`. The smoke run first counts the ``<unk>`` targets
of the run's train and dev splits (:func:`check_targets`): a tokenizer that cannot spell them
stops it before it trains.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from asrflow.artifacts import CHECKPOINTS
from asrflow.artifacts import LAST_CHECKPOINT as LAST
from asrflow.data.cuts import load_cuts, text
from asrflow.errors import AsrflowError
from asrflow.export.find import model_sample_rate
from asrflow.export.package import export_package, load_speech2text
from asrflow.io import write_json
from asrflow.text import TextNormalization
from asrflow.tokens import TokenEncoder
from asrflow.train.preflight.unk import check_unk, count_unk, target_characters
from asrflow.train.run.runner import train_run
from asrflow.train.spec import RunSpec
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


def smoke_run(spec: RunSpec, work_dir: Pathlike, summary_path: Pathlike) -> dict[str, Any]:
    """Train a few steps on a handful of utterances, validate, export the last checkpoint as a
    package and decode dev audio with ESPnet's ``Speech2Text`` from it: a manifest, tokenizer,
    model or export mismatch fails here in a minute. Starts from scratch every time."""
    work = Path(work_dir)
    if work.exists():
        shutil.rmtree(work)
    targets = check_targets(spec)
    out = work / "out"
    summary = train_run(spec, work / "train", out, work / "summary.json")
    if summary["status"] != "completed":
        raise AsrflowError(
            f"smoke run of {spec.name} failed ({summary['failure']}): {summary['error']}"
        )
    summary.update(targets)
    transcripts = sorted((out / "diagnostics" / "transcripts").glob("step*.txt"))
    if not transcripts:
        raise RuntimeError("smoke run: the validation wrote no transcripts")
    summary["transcripts"] = transcripts[-1].read_text(encoding="utf-8")
    espnet_args = json.loads((out / "espnet_config.json").read_text(encoding="utf-8"))
    export_package(
        state_dict_or_checkpoint=out / CHECKPOINTS / LAST,
        espnet_args=espnet_args,
        bpe_model=spec.bpe_model,
        tokens_txt=spec.tokens,
        out_dir=work / "package",
        artifact="smoke",
    )
    speech2text = load_speech2text(work / "package")
    dev = load_cuts(spec.dev_cuts)
    dev = dev.subset(first=min(spec.max_dev_cuts or 2, len(dev)))
    rate = model_sample_rate(espnet_args.get("frontend_conf"))
    summary["export_decode"] = {
        cut.id: speech2text(cut.resample(rate).load_audio()[0])[0][0] for cut in dev
    }
    write_json(summary_path, summary)
    shutil.rmtree(work)
    return summary


def check_targets(spec: RunSpec) -> dict[str, Any]:
    """``<unk>`` among all of a run's train and dev targets (:mod:`asrflow.train.preflight.unk`),
    before the smoke run trains: raises above the recipe's ``diagnostics.max_unk_share``, logs a
    warning below it. Returns the summary's ``unk_tokens`` (per split) and ``warnings``."""
    limit = spec.recipe.diagnostics.max_unk_share
    normalization = TextNormalization.from_dict(spec.normalization)
    encoder = TokenEncoder(spec.bpe_model, spec.tokens, normalization)
    train = [text(cut) for path in spec.train_cuts for cut in load_cuts(path)]
    dev = [text(cut) for cut in load_cuts(spec.dev_cuts)]
    counts = (
        count_unk(train, encoder, "train"),
        count_unk(dev, encoder, "dev", known=target_characters(train, encoder)),
    )
    warnings = []
    for count in counts:
        for warning in check_unk(count, limit, spec.name, spec.bpe_model):
            log.warning("run %s: %s", spec.name, warning)
            warnings.append(warning)
    return {"unk_tokens": {c.split: c.to_dict() for c in counts}, "warnings": warnings}

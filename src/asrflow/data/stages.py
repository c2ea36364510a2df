"""One function per data rule: files in, files out. Scripts call exactly one of these.

Each returns the list of audio files it read, so the script adapter can hash them into the
provenance record (through the persistent hash cache). The import names audio inside the project
relative to the project root (the current directory: Snakemake's working directory), in its cuts
as in the record, so a moved or copied project reads and checks its own audio.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from asrflow.data.cuts import load_cuts, save_cuts
from asrflow.data.filter import FilterConfig, filter_cuts, write_filter_report
from asrflow.data.importers import import_manifest
from asrflow.data.issues import ValidationConfig
from asrflow.data.shards import ShardSettings, write_shards
from asrflow.data.split import group_holdout
from asrflow.data.validate import raise_on_errors, validate_splits
from asrflow.errors import AsrflowError
from asrflow.io import write_json, write_text
from asrflow.record_paths import project_path
from asrflow.text import TextNormalization
from asrflow.types import Hz, Pathlike

log = logging.getLogger(__name__)


def audio_paths(cuts) -> list[str]:
    """The audio files a set of cuts reads."""
    return sorted({str(c.recording.sources[0].source) for c in cuts})


def with_project_audio(cuts: list) -> list:
    """``cuts`` with every audio file inside the project named relative to the project root
    (:func:`~asrflow.record_paths.project_path`; files elsewhere keep their absolute path).

    Every job runs in the project root, so Lhotse and the checks open the file there."""
    for cut in cuts:
        for source in cut.recording.sources:
            if source.type == "file":
                source.source = project_path(source.source)
    return cuts


def import_split(
    fmt: str, manifest: Pathlike, out: Pathlike, *, sampling_rate: Hz = 16000, threads: int = 4
) -> list[str]:
    """Import one manifest into ``out`` (a CutSet ``.jsonl.gz``), audio inside the project
    named relative to it (:func:`with_project_audio`)."""
    cuts = with_project_audio(
        import_manifest(fmt, manifest, sampling_rate=sampling_rate, threads=threads)
    )
    save_cuts(cuts, out)
    return audio_paths(cuts)


def holdout_split(cuts_path: Pathlike, out_dir: Pathlike, holdout: Mapping[str, Any]) -> None:
    """Split one imported CutSet by group holdout into ``out_dir/<split>.jsonl.gz``;
    ``holdout``: ``corpora.<corpus>.holdout`` with the schema's defaults filled in."""
    splits = group_holdout(
        list(load_cuts(cuts_path)),
        by=holdout["by"],
        fractions=holdout["fractions"],
        seed=holdout["seed"],
    )
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name, cuts in splits.items():
        save_cuts(cuts, Path(out_dir) / f"{name}.jsonl.gz")


def validate_corpus(
    corpus: str,
    split_paths: Mapping[str, Pathlike],
    out_dir: Pathlike,
    report_json: Pathlike,
    report_txt: Pathlike,
    *,
    validation: Mapping[str, Any],
    normalization: Mapping[str, Any],
    threads: int = 4,
    sampling_rate: Hz | None = None,
    model_rates: Mapping[str, Hz] | None = None,
    manifests: Mapping[str, str] | None = None,
) -> list[str]:
    """Validate every split together; write the report, then (only if it passed) the cuts.

    ``sampling_rate``: the corpus's declared rate, if any; ``model_rates``: ``{run: rate}``
    the frontends of the runs that use the corpus expect; ``manifests``: split -> the user's
    manifest it was imported from, for messages (see
    :func:`~asrflow.data.validate.validate_splits`).

    On errors the readable report is logged and :class:`~asrflow.errors.ValidationFailed`
    stops the workflow, naming each bad manifest line.
    """
    splits = {name: list(load_cuts(path)) for name, path in split_paths.items()}
    config = ValidationConfig.from_dict({**validation, "threads": threads})
    report = validate_splits(
        corpus,
        splits,
        config,
        TextNormalization.from_dict(normalization),
        sampling_rate=sampling_rate,
        model_rates=model_rates,
        manifests=manifests,
    )
    text = report.to_text()
    log.info("\n%s", text)
    raise_on_errors(report)
    write_json(report_json, report.to_dict())
    write_text(report_txt, text)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name, cuts in splits.items():
        save_cuts(cuts, Path(out_dir) / f"{name}.jsonl.gz")
    return audio_paths(c for cuts in splits.values() for c in cuts)


def filter_split(
    cuts_path: Pathlike,
    out: Pathlike,
    report_json: Pathlike,
    report_txt: Pathlike,
    *,
    filter: Mapping[str, Any],
    slice_fields: list[str],
    normalization: Mapping[str, Any],
    name: str = "",
) -> None:
    """Apply duration and characters-per-second limits; report every removal.

    A split the filter empties is an error naming it (``name``, e.g. ``corpus/split``): nothing
    downstream can train or evaluate on it.
    """
    kept, report = filter_cuts(
        load_cuts(cuts_path),
        FilterConfig(**filter),
        TextNormalization.from_dict(normalization),
        slice_fields=slice_fields,
    )
    if report["input"] and not report["kept"]:
        reasons = ", ".join(f"{r}: {n}" for r, n in report["removed_by_reason"].items() if n)
        corpus = name.split("/")[0] or "<corpus>"
        examples = [e for found in report["examples"].values() for e in found][:3]
        shown = "; ".join(
            f"{e['origin']} ({e['duration']} s, {e['chars_per_second']} chars/s)" for e in examples
        )
        raise AsrflowError(
            f"the filter removed all {report['input']} utterances of split "
            f"{name or cuts_path} ({reasons}; e.g. {shown}): nothing would be left to train or "
            f"evaluate on. Loosen corpora.{corpus}.filter (now {dict(filter)}) or check the "
            "manifest's durations and transcripts"
        )
    save_cuts(kept, out)
    write_filter_report(report, report_json, report_txt)


def shard_split(cuts_path: Pathlike, out_dir: Pathlike, shards: Mapping[str, Any]) -> dict:
    """Write a filtered split as Lhotse Shar shards (:func:`asrflow.data.shards.write_shards`)."""
    return write_shards(cuts_path, out_dir, ShardSettings.from_config(shards))

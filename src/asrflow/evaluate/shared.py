"""Identical weights are decoded once per eval set, scoring contract and decoding settings.

A run's artifacts are often the same bytes: ``last`` is also ``valid.loss.best`` when the loss
still fell at the last validation. Each artifact keeps its own evaluation (its rows in the
report, its own ``summary.json``), but only the first of them decodes; the others copy its
transcripts and figures and say so (``decoded_by``: the run, artifact and eval set that
decoded).

Two evaluations are the same decode when they agree on :func:`decode_key`: the package's
weights, tokenizer and ESPnet config (the config without ``bpemodel``, a path inside each
package), the eval cuts and what of them ``evaluation.filter`` excludes, the scoring contract
(with the scorer's version), the decoding settings (with the word LM) and the asrflow code
(:func:`~asrflow.provenance.library_sha256`: any code change decodes anew). Decodes are kept
under ``results/cache/decodes/<key>/``; a lock file per key makes parallel jobs with the same
key wait for the first instead of decoding twice (on a filesystem without working ``flock`` they
may both decode: the same result, only slower).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from asrflow.evaluate.decode import Decoding
from asrflow.evaluate.eval_set import eval_filter as parse_eval_filter
from asrflow.evaluate.eval_set import scored_sha256
from asrflow.evaluate.scoring import contract_sha256
from asrflow.hashing import sha256_file, sha256_json
from asrflow.io import file_lock, read_json, write_json, write_text
from asrflow.provenance import library_sha256
from asrflow.text import TextNormalization
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

OUTPUTS = ("summary.json", "utterances.csv", "alignments.txt")
"""The files of one evaluation, as kept in the cache."""

PACKAGE_LOCAL = ("bpemodel",)
"""Keys of a package's ESPnet config that name files inside that package (not the model)."""


def decode_key(
    package: Pathlike,
    files: Mapping[str, str],
    cuts_path: Pathlike,
    contract: TextNormalization,
    decoding: Decoding,
    word_lm: Pathlike | None = None,
    *,
    eval_filter: Mapping[str, Any] | None = None,
) -> str:
    """What decides an evaluation's transcripts and figures (see the module docstring);
    ``files``: the package's ``package.json`` file digests; ``eval_filter``:
    ``evaluation.filter`` (what of the eval cuts is scored)."""
    package = Path(package)
    config = yaml.safe_load((package / "config.yaml").read_text(encoding="utf-8")) or {}
    word_lm_sha256 = sha256_file(word_lm) if word_lm and decoding.mode == "lexicon_lm" else None
    return sha256_json(
        {
            "files": {k: v for k, v in files.items() if k != "config.yaml"},
            "config": {k: v for k, v in config.items() if k not in PACKAGE_LOCAL},
            "eval_cuts": scored_sha256(sha256_file(cuts_path), parse_eval_filter(eval_filter)),
            "contract": contract_sha256(contract),
            "decoding": decoding.sha256(word_lm_sha256),
            "code": library_sha256(),
        }
    )


def evaluate_once(
    evaluate: Callable[..., dict[str, Any]],
    key: str,
    cache_dir: Pathlike,
    *,
    run: str,
    artifact: str,
    eval_set: str,
    package_files: Mapping[str, str],
    summary_path: Pathlike,
    utterances_csv: Pathlike,
    alignments_txt: Pathlike,
    run_hashes: Mapping[str, Any] | None = None,
    adapter_bytes: int | None = None,
) -> dict[str, Any]:
    """Write this artifact's evaluation: from the cache when ``key`` was decoded before,
    else by calling ``evaluate(summary_path=..., utterances_csv=..., alignments_txt=...)``
    (:func:`asrflow.evaluate.stages.evaluate_artifact` with its other arguments bound) and
    keeping its outputs under ``cache_dir/key``. A copy carries this artifact's own names,
    ``package_files``, ``run_hashes`` (what its weights were trained from) and
    ``adapter_bytes``, not the first's."""
    cache = Path(cache_dir)
    entry = cache / key
    outputs = dict(
        zip(OUTPUTS, (Path(summary_path), Path(utterances_csv), Path(alignments_txt)), strict=True)
    )
    with file_lock(cache / f"{key}.lock"):
        if all((entry / name).is_file() for name in OUTPUTS):
            own = {
                "package_files": dict(package_files),
                "run_hashes": run_hashes,
                "adapter_bytes": adapter_bytes,
            }
            return _copy_shared(entry, outputs, run, artifact, eval_set, own)
        summary = evaluate(
            summary_path=summary_path, utterances_csv=utterances_csv, alignments_txt=alignments_txt
        )
        summary["decoded_by"] = {"run": run, "artifact": artifact, "eval_set": eval_set}
        summary["decode_key"] = key
        write_json(summary_path, summary)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache))
        for name, path in outputs.items():
            shutil.copyfile(path, tmp / name)
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    return summary


def _copy_shared(
    entry: Path,
    outputs: Mapping[str, Path],
    run: str,
    artifact: str,
    eval_set: str,
    own: Mapping[str, Any],
) -> dict[str, Any]:
    summary = read_json(entry / "summary.json")
    first = summary["decoded_by"]
    log.info(
        "%s %s on %s: the same weights, data, contract and decoding as %s %s on %s: its "
        "transcripts and figures are copied, not decoded again",
        run,
        artifact,
        eval_set,
        first["run"],
        first["artifact"],
        first["eval_set"],
    )
    summary.update(run=run, artifact=artifact, eval_set=eval_set, **own)
    shutil.copyfile(entry / "utterances.csv", outputs["utterances.csv"])
    header, _, rest = (entry / "alignments.txt").read_text(encoding="utf-8").partition("\n")
    header = header.replace(f"{first['run']} {first['artifact']} on", f"{run} {artifact} on", 1)
    write_text(outputs["alignments.txt"], f"{header}\n{rest}")
    write_json(outputs["summary.json"], summary)
    return summary

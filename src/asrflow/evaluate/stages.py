"""What the evaluate rule calls: one exported artifact on one eval set, files in, files out.

Writes, for ``results/runs/<run>/eval/<artifact>/<eval_set>/``:

- ``utterances.csv``: per utterance id, reference, hypothesis, normalized forms, S/D/I and its
  slice fields (:func:`asrflow.evaluate.scoring.write_utterances_csv`);
- ``alignments.txt``: the word alignment of every utterance with an error;
- ``summary.json``: pooled WER/CER (total errors / total reference units) with their 95 %
  intervals (``wer_ci_low`` ... ``cer_ci_high``, a bootstrap over utterances recorded once under
  ``interval``: :mod:`asrflow.evaluate.intervals`), S/D/I, per-slice figures (with intervals)
  for every slice field, real-time factor, dtypes, decoding settings, and the hashes
  that say what was measured: the artifact's weights, the eval cuts and the scoring contract.

The script also archives the summary by those hashes
(:func:`asrflow.evaluate.archive.archive_eval_summary`), so a later data or model revision
adds rows to the comparison instead of overwriting these.
"""

from __future__ import annotations

import functools
import logging
import platform
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asrflow.data.cuts import field, load_cuts, origin, text
from asrflow.data.filter import FilterConfig
from asrflow.errors import AsrflowError
from asrflow.evaluate.decode import Decoding, PackageModel, timed_transcribe
from asrflow.evaluate.eval_set import eval_filter as parse_eval_filter
from asrflow.evaluate.eval_set import scored_cuts, scored_sha256
from asrflow.evaluate.intervals import BOOTSTRAP, Bootstrap, error_rate_intervals
from asrflow.evaluate.scoring import (
    MISSING_SLICE,
    SCORING_VERSION,
    UtteranceScore,
    by_slice,
    confusions,
    contract_sha256,
    pooled,
    score_utterance,
    write_alignments,
    write_utterances_csv,
)
from asrflow.evaluate.shared import decode_key, evaluate_once
from asrflow.evaluate.word_lm import resolve_auto
from asrflow.hashing import sha256_file
from asrflow.io import read_json, write_json
from asrflow.text import TextNormalization, normalize
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

SCHEMA = "asrflow.eval/1"


def load_audio(cut: Any, sample_rate: int) -> np.ndarray:
    """A cut's audio as a float32 mono waveform at ``sample_rate``."""
    c = cut if cut.sampling_rate == sample_rate else cut.resample(sample_rate)
    try:
        audio = c.load_audio()
    except Exception as exc:
        raise AsrflowError(f"cut {cut.id}: cannot load its audio ({exc})") from exc
    return audio.mean(axis=0).astype(np.float32) if audio.ndim > 1 else audio.astype(np.float32)


def evaluate_artifact(
    package: Pathlike,
    cuts_path: Pathlike,
    *,
    run: str,
    artifact: str,
    eval_set: str,
    contract: TextNormalization,
    decoding: Decoding,
    slice_fields: Sequence[str],
    summary_path: Pathlike,
    utterances_csv: Pathlike,
    alignments_txt: Pathlike,
    threads: int | None = None,
    word_lm: Pathlike | None = None,
    eval_filter: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Decode ``cuts_path`` (all of it, less what ``eval_filter``, ``evaluation.filter``,
    excludes: :mod:`asrflow.evaluate.eval_set`) with the package and score it under
    ``contract``; ``word_lm``: the run's word counts (rule word_lm) for decoding mode
    ``lexicon_lm``."""
    if threads:
        torch.set_num_threads(threads)
    started = time.time()
    if decoding.mode != "lexicon_lm":
        word_lm = None  # an input the rule may pass whatever the mode; used by lexicon_lm only
    word_lm_sha256 = sha256_file(word_lm) if word_lm else None
    model = PackageModel(package, decoding, word_lm)
    whole = list(load_cuts(cuts_path))
    if not whole:
        raise AsrflowError(f"{cuts_path}: the eval set {eval_set} has no utterances")
    excluding = parse_eval_filter(eval_filter)
    cuts, cover = scored_cuts(whole, excluding, contract)
    if not cuts:
        raise AsrflowError(
            f"evaluation.filter excludes every utterance of the eval set {eval_set} "
            f"({cuts_path}): widen its bounds, or remove it to score the whole set"
        )
    check_long_form(cuts, decoding, eval_set)
    sr = model.sample_rate
    audio = [load_audio(c, sr) for c in cuts]
    audio_seconds = float(sum(len(a) for a in audio)) / sr
    hyps, decode_seconds = timed_transcribe(model, audio, sr, decoding.batch_seconds)

    scores = _score(cuts, hyps, contract, slice_fields)
    write_utterances_csv(scores, utterances_csv)
    write_alignments(
        scores,
        alignments_txt,
        header=f"{run} {artifact} on {eval_set}; scoring contract {contract_sha256(contract)}",
    )
    summary: dict[str, Any] = {
        "schema": SCHEMA,
        "run": run,
        "artifact": artifact,
        "eval_set": eval_set,
        **_what_was_measured(model, cuts_path, contract, scores, slice_fields, excluding),
        **cover,
        **_how_it_was_decoded(model, decoding, word_lm_sha256, cuts),
        **_timing(model, audio_seconds, decode_seconds, started),
    }
    write_json(summary_path, summary)
    _log_summary(summary, len(scores), decoding.dtype)
    return summary


def check_long_form(cuts: Sequence[Any], decoding: Decoding, eval_set: str) -> None:
    """Mode beam decodes whole utterances: refuse an eval set with one longer than
    ``window_seconds`` (naming it) rather than push it through attention in one piece."""
    if decoding.mode != "beam":
        return
    long = [c for c in cuts if decoding.windowed(c.duration)]
    if long:
        first = long[0]
        raise AsrflowError(
            f"eval set {eval_set}: {len(long)} utterance(s) are longer than "
            f"evaluation.window_seconds ({decoding.window_seconds:g} s), e.g. {first.id} "
            f"({origin(first)}, {first.duration:.1f} s), and decoding.mode beam decodes whole "
            "utterances: use mode greedy_ctc or lexicon_lm (they decode long ones in windows), "
            "or set evaluation.window_seconds to 0 to decode them whole in beam mode"
        )


def _score(
    cuts: Sequence[Any],
    hyps: Sequence[str],
    contract: TextNormalization,
    slice_fields: Sequence[str],
) -> list[UtteranceScore]:
    """Each cut's hypothesis scored against its transcript, with its slice fields."""
    return [
        score_utterance(
            c.id,
            text(c),
            hyp,
            contract,
            fields={f: _field_value(c, f) for f in slice_fields},
        )
        for c, hyp in zip(cuts, hyps, strict=True)
    ]


def _what_was_measured(
    model: PackageModel,
    cuts_path: Pathlike,
    contract: TextNormalization,
    scores: Sequence[UtteranceScore],
    slice_fields: Sequence[str],
    excluding: FilterConfig | None,
) -> dict[str, Any]:
    """The summary's hashes of the weights, eval cuts (with the eval filter's settings, if any:
    :func:`~asrflow.evaluate.eval_set.scored_sha256`) and contract, and the pooled and
    per-slice error rates."""
    return {
        "artifact_sha256": model.manifest["files"]["model.pth"],
        "package_files": dict(model.manifest["files"]),
        "run_hashes": run_hashes(model.manifest),
        "adapter_bytes": adapter_bytes(model.manifest),
        "eval_cuts_sha256": scored_sha256(sha256_file(cuts_path), excluding),
        "contract": contract.to_dict(),
        "contract_sha256": contract_sha256(contract),
        "scoring_version": SCORING_VERSION,
        **pooled(scores),
        **score_intervals(scores),
        "interval": BOOTSTRAP.to_dict(),
        "slices": sliced_with_intervals(scores, slice_fields),
        "confusions": confusions(scores),
        "empty_hypotheses": sum(1 for s in scores if not s.hyp_norm),
    }


def score_intervals(
    scores: Sequence[UtteranceScore], bootstrap: Bootstrap = BOOTSTRAP
) -> dict[str, float | None]:
    """``wer_ci_low``, ``wer_ci_high``, ``cer_ci_low``, ``cer_ci_high`` of ``scores`` (fractions,
    as ``wer``; ``None`` where the rate is), by
    :func:`~asrflow.evaluate.intervals.error_rate_intervals`."""
    columns = ("word_errors", "ref_words", "char_errors", "ref_chars")
    counts = [np.array([getattr(s, c) for s in scores], dtype=np.int64) for c in columns]
    return error_rate_intervals(*counts, bootstrap)


def sliced_with_intervals(
    scores: Sequence[UtteranceScore], slice_fields: Sequence[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`asrflow.evaluate.scoring.by_slice`, each slice value's figures with
    :func:`score_intervals` over its utterances."""
    slices = by_slice(scores, slice_fields)
    for name, values in slices.items():
        groups: dict[str, list[UtteranceScore]] = {}
        for s in scores:
            groups.setdefault(s.fields.get(name, MISSING_SLICE), []).append(s)
        for value, figures in values.items():
            figures.update(score_intervals(groups[value]))
    return slices


def _how_it_was_decoded(
    model: PackageModel, decoding: Decoding, word_lm_sha256: str | None, cuts: Sequence[Any]
) -> dict[str, Any]:
    """The summary's dtypes and decoding settings (with the word LM's out-of-vocabulary rate)."""
    return {
        "dtype": decoding.dtype,
        "dtypes": model.dtypes,
        "autocast": False,
        "decoding": decoding.to_dict(),
        "word_lm_sha256": word_lm_sha256,
        **(out_of_vocabulary(cuts, model.word_lm.counts) if model.word_lm else {}),
        "decoding_sha256": decoding.sha256(word_lm_sha256),
    }


def _timing(
    model: PackageModel, audio_seconds: float, decode_seconds: float, started: float
) -> dict[str, Any]:
    """The summary's durations, real-time factor, device and threads, and when it was made."""
    return {
        "audio_seconds": audio_seconds,
        "decode_seconds": decode_seconds,
        "rtf": decode_seconds / audio_seconds if audio_seconds else None,
        "wall_seconds": time.time() - started,
        "device": str(model.device),
        "device_name": _device_name(model.device),
        "threads": torch.get_num_threads(),
        "evaluated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _log_summary(summary: Mapping[str, Any], utterances: int, dtype: str) -> None:
    """Log the summary's WER, CER and RTF; warn when lexicon_lm cannot output many words."""
    wer = summary.get("wer")
    log.info(
        "%s %s on %s: WER %s, CER %s over %d utterances (%s, RTF %.3f)",
        summary["run"],
        summary["artifact"],
        summary["eval_set"],
        f"{100 * wer:.2f} %" if wer is not None else "n/a",
        f"{100 * summary['cer']:.2f} %" if summary.get("cer") is not None else "n/a",
        utterances,
        dtype,
        summary["rtf"] or 0.0,
    )
    if (summary.get("oov_rate") or 0.0) > OOV_WARNING:
        log.warning(
            "%s: %.1f %% of the reference words are not in the run's train transcripts; "
            "lexicon_lm decoding cannot output them (decoding.mode greedy_ctc can)",
            summary["eval_set"],
            100 * summary["oov_rate"],
        )


OOV_WARNING = 0.02
"""Out-of-vocabulary rate above which lexicon_lm's summary comes with a warning."""


def out_of_vocabulary(cuts: Sequence[Any], counts: Mapping[str, Any]) -> dict[str, Any]:
    """``oov_words`` and ``oov_rate``: reference words (normalized as the word LM's train text)
    that the word LM (its ``counts``, rule word_lm) never saw, which ``lexicon_lm`` decoding
    cannot output."""
    vocabulary = counts["unigram"]
    norm = TextNormalization.from_dict(counts.get("normalization") or {})
    words = [w for c in cuts for w in normalize(text(c), norm).split()]
    oov = sum(1 for w in words if w not in vocabulary)
    return {"oov_words": oov, "oov_rate": oov / len(words) if words else None}


def _field_value(cut: Any, name: str) -> str:
    value = field(cut, name)
    return "(none)" if value is None else str(value)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def run_hashes(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a package's weights were trained from (recipe, data, tokenizer, start weights), as
    its export recorded them; ``None`` for a package without that record (a baseline)."""
    return (manifest.get("provenance") or {}).get("run_hashes")


def adapter_bytes(manifest: Mapping[str, Any]) -> int | None:
    """The size of a package's adapter-only export (a LoRA run's, :mod:`asrflow.export.adapter`),
    for the report beside the trainable parameters; ``None`` for a package without one."""
    return (manifest.get("adapter") or {}).get("bytes")


def evaluate_artifact_once(
    package: Pathlike, cuts_path: Pathlike, *, cache_dir: Pathlike, **kwargs: Any
) -> dict[str, Any]:
    """:func:`evaluate_artifact`, decoding identical weights only once per eval set, contract
    and decoding settings (:mod:`asrflow.evaluate.shared`; decodes kept in ``cache_dir``).
    Decoding mode ``auto`` is first replaced by the run's choice (rule word_lm)."""
    kwargs["decoding"] = resolve_auto(kwargs["decoding"], kwargs.get("word_lm"))
    manifest = read_json(Path(package) / "package.json")
    files = manifest["files"]
    key = decode_key(
        package,
        files,
        cuts_path,
        kwargs["contract"],
        kwargs["decoding"],
        kwargs.get("word_lm"),
        eval_filter=kwargs.get("eval_filter"),
    )
    outputs = {k: kwargs.pop(k) for k in ("summary_path", "utterances_csv", "alignments_txt")}
    return evaluate_once(
        functools.partial(evaluate_artifact, package, cuts_path, **kwargs),
        key,
        cache_dir,
        run=kwargs["run"],
        artifact=kwargs["artifact"],
        eval_set=kwargs["eval_set"],
        package_files=files,
        run_hashes=run_hashes(manifest),
        adapter_bytes=adapter_bytes(manifest),
        **outputs,
    )


_DECODING_KEYS = {
    "mode": str,
    "beam_size": int,
    "ctc_weight": lambda value: value,  # as given: None, or a number kept as written
    "lm_weight": float,
    "word_score": float,
    "beam_size_token": int,
}
_EVALUATION_KEYS = {
    "dtype": str,
    "device": str,
    "batch_seconds": float,
    "window_seconds": float,
    "window_overlap_seconds": float,
}


def decoding_from_config(evaluation: Mapping[str, Any]) -> Decoding:
    """:class:`Decoding` from the ``evaluation`` section of config.yaml. Keys it lacks keep
    :class:`Decoding`'s defaults, which are the schema's (``tests/evaluate/test_decode.py``)."""
    settings: dict[str, Any] = {}
    for section, keys in (
        (evaluation.get("decoding") or {}, _DECODING_KEYS),
        (evaluation, _EVALUATION_KEYS),
    ):
        for key, cast in keys.items():
            if section.get(key) is not None:
                settings[key] = cast(section[key])
    return Decoding(**settings)

"""Choosing a run's model on dev: keep the average only if it beats the best single checkpoint.

The rule, applied to the evaluate rule's summaries of every artifact on the run's dev set (never
on test; :func:`select_model` refuses any other eval set):

1. *Single checkpoints* are ``last`` and each criterion's ``<monitor>.best``; *averages* are the
   ``<monitor>.ave_<k>best`` artifacts. ``baseline`` (the start weights of a fine-tuning run) is
   reported beside them but never chosen: it is not what the run produced.
2. The best single checkpoint is the one with the lowest dev WER; ties go to the lower CER, then
   to a criterion's best over ``last``, then to the name (alphabetical), so the choice is
   deterministic.
3. The best average is found the same way. It is selected only if its dev WER is *strictly*
   lower than the best single checkpoint's; on a tie the single checkpoint is kept (it is a model
   the run actually trained and validated, and a tie is no evidence that averaging helped).
   With ``selection.require_significant`` it must also be *significantly* lower: the paired 95 %
   interval of the WER difference (average minus best single) lies entirely below 0.
4. All summaries must share one scoring contract (its SHA-256); figures scored under different
   contracts are never compared.

**Significance.** Given the evaluations' per-utterance errors (their ``utterances.csv``, paired
by utterance ID; :mod:`asrflow.evaluate.paired`), ``selected.json`` records under
``significance`` the dev WER difference of the best average minus the best single checkpoint
(fractions), its paired bootstrap interval (:data:`asrflow.evaluate.intervals.BOOTSTRAP`: 1000
resamples, seed 0, 95 %) and whether it is significant (the interval excludes 0), whichever way
the choice went; the reason says it in words. The option changes no choice unless it is on.

**What dev measures.** When every speaker (or session) of the dev set is also in the run's
train splits while a test set of the run has speakers train does not have,
``dev_measures`` is ``"seen speakers only"`` and ``dev_groups`` holds the finding with its message
(:func:`asrflow.data.dev_groups.run_finding`, from the corpora's validation reports): the dev WER
that chose the model says little about new speakers. Both are ``null`` otherwise, and when a
validation report has no group values to tell by. It changes no choice.

``selected.json`` holds the choice, the reason in words, both figures, the significance of their
difference, what dev measures and the hashes of every candidate's weights.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from asrflow.artifacts import BASELINE, LAST, is_average
from asrflow.data.dev_groups import run_finding
from asrflow.errors import AsrflowError
from asrflow.evaluate.intervals import BOOTSTRAP, Bootstrap
from asrflow.evaluate.paired import UtteranceErrors, paired_difference, read_utterance_errors
from asrflow.io import read_json, write_json
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

OPTION = "selection.require_significant"

RULE = (
    "average kept only if its dev WER is strictly lower than the best single checkpoint's; "
    "ties: lower CER, then <monitor>.best before last, then name"
)
RULE_SIGNIFICANT = (
    f"{RULE}; with {OPTION}, the average's gain must also be significant at 95 % (the paired "
    "bootstrap interval of its WER difference to the best single checkpoint entirely below 0)"
)

WER_TOLERANCE = 1e-9
"""How far the WER difference recomputed from ``utterances.csv`` may be from the summaries'."""


def _rank(summary: Mapping[str, Any]) -> tuple:
    name = summary["artifact"]
    wer, cer = summary.get("wer"), summary.get("cer")
    if wer is None:
        raise AsrflowError(
            f"artifact {name}: no dev WER (the dev set has no reference words); cannot select"
        )
    return (wer, cer if cer is not None else float("inf"), name == LAST, name)


def _figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "artifact": summary["artifact"],
        "wer": summary.get("wer"),
        "cer": summary.get("cer"),
        "artifact_sha256": summary.get("artifact_sha256"),
    }


def check_dev_summaries(
    dev_summaries: Sequence[Mapping[str, Any]], *, run: str, dev_set: str
) -> str:
    """Raise unless every summary is ``run``'s evaluation on ``dev_set`` and all share one
    scoring contract; return that contract's SHA-256."""
    if not dev_summaries:
        raise AsrflowError(f"run {run}: no dev evaluations to select from")
    for s in dev_summaries:
        if s.get("eval_set") != dev_set:
            raise AsrflowError(
                f"run {run}: selection uses the dev set {dev_set} only; got an evaluation on "
                f"{s.get('eval_set')!r} (artifact {s.get('artifact')}). Test sets never choose."
            )
        if s.get("run") not in (None, run):
            raise AsrflowError(f"run {run}: got the evaluation of run {s.get('run')!r}")
    contracts = {s.get("contract_sha256") for s in dev_summaries}
    if len(contracts) != 1:
        raise AsrflowError(
            f"run {run}: the dev evaluations were scored under {len(contracts)} different "
            "scoring contracts; rerun the evaluations so that they share one"
        )
    return contracts.pop()


def significance_record(
    average: Mapping[str, Any],
    single: Mapping[str, Any],
    utterances: Mapping[str, UtteranceErrors],
    bootstrap: Bootstrap = BOOTSTRAP,
) -> dict[str, Any]:
    """The dev WER difference ``average`` minus ``single`` (summaries), its paired interval
    and whether it is significant (the interval excludes 0), from their ``utterances``."""
    a, s = average["artifact"], single["artifact"]
    missing = [name for name in (a, s) if name not in utterances]
    if missing:
        raise AsrflowError(
            f"no per-utterance errors (utterances.csv) of {', '.join(missing)}: the "
            "significance of the average's difference cannot be computed"
        )
    result = paired_difference(utterances[a], utterances[s], bootstrap)
    if result is None:
        raise AsrflowError(
            f"{a} and {s} did not score the same dev utterances (IDs or reference word counts "
            "differ); rerun both evaluations"
        )
    diff, low, high = result
    if abs(diff - (average["wer"] - single["wer"])) > WER_TOLERANCE:
        raise AsrflowError(
            f"the utterances.csv of {a} and {s} give a WER difference of {diff:.6f}, their "
            f"summaries {average['wer'] - single['wer']:.6f}: stale files; rerun both evaluations"
        )
    return {
        "artifact": a,
        "against": s,
        "wer_diff": diff,
        "ci_low": low,
        "ci_high": high,
        **bootstrap.to_dict(),
        "significant": bool(high < 0 or low > 0),
    }


def select_model(
    dev_summaries: Sequence[Mapping[str, Any]],
    *,
    run: str,
    dev_set: str,
    utterances: Mapping[str, UtteranceErrors] | None = None,
    require_significant: bool = False,
    dev_groups: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The selection record of one run (see the module docstring for the rule).

    ``utterances``: each artifact's per-utterance errors on ``dev_set``, for the significance of
    the average's difference (``significance`` is ``None`` without them, or without an average;
    ``require_significant`` needs them). ``dev_groups``: the finding that dev measures seen
    speakers only (:meth:`asrflow.data.dev_groups.DevGroupFinding.to_dict`), if any."""
    contract = check_dev_summaries(dev_summaries, run=run, dev_set=dev_set)
    singles = [
        s for s in dev_summaries if not is_average(s["artifact"]) and s["artifact"] != BASELINE
    ]
    averages = [s for s in dev_summaries if is_average(s["artifact"])]
    if not singles:
        raise AsrflowError(f"run {run}: no single checkpoint was evaluated on {dev_set}")
    best_single = min(singles, key=_rank)
    best_average = min(averages, key=_rank) if averages else None
    significance = None
    if best_average is not None and (utterances is not None or require_significant):
        try:
            significance = significance_record(best_average, best_single, utterances or {})
        except AsrflowError as e:
            raise AsrflowError(f"run {run}: {e}") from None
    selected, reason = _decide(
        best_single, best_average, significance, dev_set, require_significant
    )
    return {
        "run": run,
        "eval_set": dev_set,
        "selected": selected["artifact"],
        "selected_sha256": selected.get("artifact_sha256"),
        "reason": reason,
        "rule": RULE_SIGNIFICANT if require_significant else RULE,
        "require_significant": require_significant,
        "best_single": _figures(best_single),
        "best_average": _figures(best_average) if best_average is not None else None,
        "significance": significance,
        "candidates": {s["artifact"]: _figures(s) for s in dev_summaries},
        "contract_sha256": contract,
        "dev_measures": dev_groups["measures"] if dev_groups else None,
        "dev_groups": dict(dev_groups) if dev_groups else None,
    }


def _decide(
    single: Mapping[str, Any],
    average: Mapping[str, Any] | None,
    significance: Mapping[str, Any] | None,
    dev_set: str,
    require_significant: bool,
) -> tuple[Mapping[str, Any], str]:
    """The chosen summary and the reason in words."""
    if average is None:
        return single, f"{single['artifact']} has the lowest dev WER; the run has no average"
    names = f"the average {average['artifact']}", f"the best single checkpoint {single['artifact']}"
    said = f"; {_significance_words(significance)}" if significance is not None else ""
    if average["wer"] >= single["wer"]:
        relation = "ties" if average["wer"] == single["wer"] else "does not beat"
        return single, (
            f"{names[0]} {relation} {names[1]} on {dev_set} (WER {_pct(average['wer'])} vs "
            f"{_pct(single['wer'])}); the single checkpoint is kept{said}"
        )
    beats = (
        f"{names[0]} beats {names[1]} on {dev_set}: WER {_pct(average['wer'])} < "
        f"{_pct(single['wer'])}"
    )
    if not require_significant:
        return average, f"{beats}{said}"
    if significance is not None and significance["ci_high"] < 0:
        return average, f"{beats}{said}, as {OPTION} asks"
    return single, f"{beats}{said}, and {OPTION} keeps the single checkpoint"


def _significance_words(significance: Mapping[str, Any]) -> str:
    """``the difference, -0.15 points (95 % interval -0.55 to +0.36), is not significant``."""
    level = f"{100 * significance['level']:g} %"
    verdict = "is significant" if significance["significant"] else "is not significant"
    return (
        f"the difference, {_points(significance['wer_diff'])} points ({level} interval "
        f"{_points(significance['ci_low'])} to {_points(significance['ci_high'])}), "
        f"{verdict} at {level}"
    )


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def _points(x: float) -> str:
    return f"{100 * x:+.2f}"


def select_run(
    dev_summaries: Sequence[Pathlike],
    *,
    run: str,
    dev_set: str,
    out: Pathlike,
    utterances: Sequence[Pathlike] | None = None,
    require_significant: bool = False,
    validation_reports: Sequence[Pathlike] = (),
    train_corpora: Sequence[str] = (),
    test_sets: Sequence[str] = (),
) -> dict[str, Any]:
    """:func:`select_model` on summary files and the ``utterances.csv`` beside each (paired by
    directory); writes ``selected.json`` to ``out``. ``validation_reports``: the JSON validation
    reports of the run's corpora, whose group values say whether dev (``dev_set``) measures seen
    speakers only against the run's ``train_corpora`` and ``test_sets``."""
    summaries = [read_json(p) for p in dev_summaries]
    errors = None
    if utterances is not None:
        errors = _dev_utterance_errors(dev_summaries, summaries, utterances, run=run)
    finding = None
    if validation_reports:
        finding = run_finding(
            [read_json(p) for p in validation_reports],
            train_corpora=train_corpora,
            dev_set=dev_set,
            test_sets=test_sets,
        )
    selection = select_model(
        summaries,
        run=run,
        dev_set=dev_set,
        utterances=errors,
        require_significant=require_significant,
        dev_groups=finding.to_dict() if finding is not None else None,
    )
    write_json(out, selection)
    log.info("run %s: selected %s (%s)", run, selection["selected"], selection["reason"])
    if finding is not None:
        log.warning("run %s: %s -> %s", run, finding.message, finding.hint)
    return selection


def _dev_utterance_errors(
    paths: Sequence[Pathlike],
    summaries: Sequence[Mapping[str, Any]],
    utterances: Sequence[Pathlike],
    *,
    run: str,
) -> dict[str, UtteranceErrors]:
    """Artifact -> per-utterance errors, from the ``utterances.csv`` beside each summary."""
    by_dir = {Path(p).parent: p for p in utterances}
    out = {}
    for path, summary in zip(paths, summaries, strict=True):
        csv_path = by_dir.get(Path(path).parent)
        if csv_path is None:
            raise AsrflowError(f"run {run}: no utterances.csv given beside {path}")
        out[summary["artifact"]] = read_utterance_errors(csv_path)
    return out

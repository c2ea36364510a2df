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
4. All summaries must share one scoring contract (its SHA-256); figures scored under different
   contracts are never compared.

``selected.json`` holds the choice, the reason in words, both figures and the hashes of every
candidate's weights.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from asrflow.artifacts import BASELINE, LAST, is_average
from asrflow.errors import AsrflowError
from asrflow.io import read_json, write_json
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


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


def select_model(
    dev_summaries: Sequence[Mapping[str, Any]], *, run: str, dev_set: str
) -> dict[str, Any]:
    """The selection record of one run (see the module docstring for the rule)."""
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
    singles = [
        s for s in dev_summaries if not is_average(s["artifact"]) and s["artifact"] != BASELINE
    ]
    averages = [s for s in dev_summaries if is_average(s["artifact"])]
    if not singles:
        raise AsrflowError(f"run {run}: no single checkpoint was evaluated on {dev_set}")
    best_single = min(singles, key=_rank)
    best_average = min(averages, key=_rank) if averages else None

    if best_average is None:
        selected = best_single
        reason = f"{best_single['artifact']} has the lowest dev WER; the run has no average"
    elif best_average["wer"] < best_single["wer"]:
        selected = best_average
        reason = (
            f"the average {best_average['artifact']} beats the best single checkpoint "
            f"{best_single['artifact']} on {dev_set}: WER {_pct(best_average['wer'])} < "
            f"{_pct(best_single['wer'])}"
        )
    else:
        selected = best_single
        relation = "ties" if best_average["wer"] == best_single["wer"] else "does not beat"
        reason = (
            f"the average {best_average['artifact']} {relation} the best single checkpoint "
            f"{best_single['artifact']} on {dev_set} (WER {_pct(best_average['wer'])} vs "
            f"{_pct(best_single['wer'])}); the single checkpoint is kept"
        )
    return {
        "run": run,
        "eval_set": dev_set,
        "selected": selected["artifact"],
        "selected_sha256": selected.get("artifact_sha256"),
        "reason": reason,
        "rule": "average kept only if its dev WER is strictly lower than the best single "
        "checkpoint's; ties: lower CER, then <monitor>.best before last, then name",
        "best_single": _figures(best_single),
        "best_average": _figures(best_average) if best_average is not None else None,
        "candidates": {s["artifact"]: _figures(s) for s in dev_summaries},
        "contract_sha256": contracts.pop(),
    }


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def select_run(
    dev_summaries: Sequence[Pathlike], *, run: str, dev_set: str, out: Pathlike
) -> dict[str, Any]:
    """:func:`select_model` on summary files; writes ``selected.json`` to ``out``."""
    summaries = [read_json(p) for p in dev_summaries]
    selection = select_model(summaries, run=run, dev_set=dev_set)
    write_json(out, selection)
    log.info("run %s: selected %s (%s)", run, selection["selected"], selection["reason"])
    return selection

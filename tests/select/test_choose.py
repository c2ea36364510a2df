"""select_model: the average is kept only if it beats the best single checkpoint on dev."""

from __future__ import annotations

import json

import pytest

from asrflow.errors import AsrflowError
from asrflow.select.choose import select_model, select_run

DEV = "demo.dev"


def ev(artifact: str, wer: float, cer: float = 0.1, eval_set: str = DEV, contract: str = "c1"):
    return {
        "run": "r",
        "artifact": artifact,
        "eval_set": eval_set,
        "wer": wer,
        "cer": cer,
        "contract_sha256": contract,
        "artifact_sha256": f"sha-{artifact}",
    }


def test_average_that_beats_the_best_single_checkpoint_is_selected():
    s = select_model(
        [ev("last", 0.30), ev("valid.loss.best", 0.25), ev("valid.loss.ave_3best", 0.22)],
        run="r",
        dev_set=DEV,
    )
    assert s["selected"] == "valid.loss.ave_3best"
    assert s["selected_sha256"] == "sha-valid.loss.ave_3best"
    assert s["best_single"]["artifact"] == "valid.loss.best"
    assert "beats" in s["reason"] and "22.00 %" in s["reason"] and "25.00 %" in s["reason"]


def test_average_that_is_worse_is_dropped_for_the_best_single_checkpoint():
    # the measured case: the average scored 4.6 % against 3.4 % for the best single one
    s = select_model(
        [ev("valid.loss.best", 0.034), ev("valid.loss.ave_2best", 0.046), ev("last", 0.05)],
        run="r",
        dev_set=DEV,
    )
    assert s["selected"] == "valid.loss.best"
    assert s["best_average"]["wer"] == 0.046
    assert "does not beat" in s["reason"]


def test_a_tie_keeps_the_single_checkpoint():
    s = select_model(
        [ev("valid.wer.best", 0.2, cer=0.09), ev("valid.wer.ave_2best", 0.2, cer=0.01)],
        run="r",
        dev_set=DEV,
    )
    assert s["selected"] == "valid.wer.best"
    assert "ties" in s["reason"]


def test_single_ties_go_to_lower_cer_then_a_criterion_best_over_last():
    s = select_model([ev("last", 0.2, 0.05), ev("valid.loss.best", 0.2, 0.06)], run="r",
                     dev_set=DEV)  # fmt: skip
    assert s["selected"] == "last"  # lower CER wins
    s = select_model([ev("last", 0.2, 0.05), ev("valid.loss.best", 0.2, 0.05)], run="r",
                     dev_set=DEV)  # fmt: skip
    assert s["selected"] == "valid.loss.best"


def test_baseline_is_reported_but_never_selected():
    s = select_model([ev("baseline", 0.01), ev("last", 0.3)], run="r", dev_set=DEV)
    assert s["selected"] == "last"
    assert "baseline" in s["candidates"]


def test_test_sets_never_choose():
    with pytest.raises(AsrflowError, match="Test sets never choose"):
        select_model([ev("last", 0.3), ev("valid.loss.best", 0.1, eval_set="demo.test")], run="r",
                     dev_set=DEV)  # fmt: skip


def test_mixed_scoring_contracts_are_refused():
    with pytest.raises(AsrflowError, match="scoring contracts"):
        select_model([ev("last", 0.3), ev("valid.loss.best", 0.1, contract="c2")], run="r",
                     dev_set=DEV)  # fmt: skip


def test_select_run_writes_selected_json(tmp_path):
    paths = []
    for e in [ev("last", 0.3), ev("valid.loss.ave_3best", 0.2)]:
        p = tmp_path / f"{e['artifact']}.json"
        p.write_text(json.dumps(e))
        paths.append(p)
    out = tmp_path / "selected.json"
    s = select_run(paths, run="r", dev_set=DEV, out=out)
    assert json.loads(out.read_text()) == s
    assert s["selected"] == "valid.loss.ave_3best"

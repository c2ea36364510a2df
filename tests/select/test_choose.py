"""select_model: the average is kept only if it beats the best single checkpoint on dev (and,
with selection.require_significant, only if its gain is significant)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asrflow.errors import AsrflowError
from asrflow.evaluate.intervals import difference_interval
from asrflow.evaluate.paired import UtteranceErrors
from asrflow.evaluate.scoring import score_utterance, write_utterances_csv
from asrflow.select.choose import select_model, select_run
from asrflow.text import TextNormalization

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


def validation_report(path, corpus: str, **speakers: str) -> str:
    """A corpus's validation.json as validate_corpus writes it: split -> its speakers (one per
    letter) under ``groups``."""
    groups = {split: {"speaker": list(s), "session": []} for split, s in speakers.items()}
    path.write_text(
        json.dumps(
            {
                "corpus": corpus,
                "config": {"group_fields": ["speaker", "session"]},
                "groups": groups,
            }
        )
    )
    return str(path)


def test_selected_json_says_when_dev_measures_seen_speakers_only(tmp_path):
    """Issue 31, item 2: dev of held-out takes of the training speakers, a test set of new ones;
    the record says so and the choice is made as before."""
    summary = tmp_path / "last.json"
    summary.write_text(json.dumps(ev("last", 0.02)))
    report = validation_report(tmp_path / "v.json", "demo", train="abc", dev="abc", test="xyz")
    out = tmp_path / "selected.json"
    s = select_run(
        [summary],
        run="r",
        dev_set=DEV,
        out=out,
        validation_reports=[report],
        train_corpora=["demo"],
        test_sets=["demo.test"],
    )
    assert json.loads(out.read_text()) == s and s["selected"] == "last"
    assert s["dev_measures"] == "seen speakers only"
    assert s["dev_groups"]["unseen"] == {"demo.test": 3} and s["dev_groups"]["shared"] == 3
    assert s["dev_groups"]["message"].startswith(
        "demo.dev measures seen speakers only: all 3 of its speakers are also in demo.train"
    )
    assert "in corpora.demo" in s["dev_groups"]["hint"]


@pytest.mark.parametrize(
    "speakers",
    [
        {"train": "abc", "dev": "abc", "test": "abc"},  # speaker-dependent by design
        {"train": "abc", "dev": "ax", "test": "xyz"},  # dev has a new speaker
        {"train": "", "dev": "", "test": ""},  # no speakers: cannot tell
    ],
)
def test_selected_json_says_nothing_when_dev_can_tell_or_nothing_is_known(tmp_path, speakers):
    summary = tmp_path / "last.json"
    summary.write_text(json.dumps(ev("last", 0.02)))
    report = validation_report(tmp_path / "v.json", "demo", **speakers)
    s = select_run(
        [summary],
        run="r",
        dev_set=DEV,
        out=tmp_path / "selected.json",
        validation_reports=[report],
        train_corpora=["demo"],
        test_sets=["demo.test"],
    )
    assert s["dev_measures"] is None and s["dev_groups"] is None


# --- significance of the average's difference (paired bootstrap over dev utterances) ---------

N_UTTS, WORDS = 50, 10


def errors(word_errors: list[int]) -> UtteranceErrors:
    """Per-utterance errors of ``N_UTTS`` utterances of ``WORDS`` reference words each."""
    return UtteranceErrors(
        ids=np.array([f"u{i:02d}" for i in range(N_UTTS)], dtype=object),
        word_errors=np.array(word_errors, dtype=np.int64),
        ref_words=np.full(N_UTTS, WORDS, dtype=np.int64),
    )


def scored(artifact: str, word_errors: list[int]) -> tuple[dict, UtteranceErrors]:
    """A dev summary whose WER is pooled from ``word_errors``, and those errors."""
    return ev(artifact, sum(word_errors) / (N_UTTS * WORDS)), errors(word_errors)


# the single checkpoint makes one error in every utterance; the averages...
SINGLE = [1] * N_UTTS
CLEAR_GAIN = [0] * N_UTTS  # ...none at all: significant
SLIGHT_GAIN = [0] + [1] * (N_UTTS - 1)  # ...one fewer, in one utterance: not significant


def choose(average_errors: list[int], **kwargs) -> dict:
    summaries, utterances = zip(
        scored("valid.loss.best", SINGLE),
        scored("last", [2] * N_UTTS),
        scored("valid.loss.ave_3best", average_errors),
        strict=True,
    )
    by_name = {s["artifact"]: u for s, u in zip(summaries, utterances, strict=True)}
    return select_model(list(summaries), run="r", dev_set=DEV, utterances=by_name, **kwargs)


def test_significance_of_a_clear_gain_is_recorded_with_its_paired_interval():
    s = choose(CLEAR_GAIN)
    sig = s["significance"]
    diff, low, high = difference_interval(CLEAR_GAIN, SINGLE, [WORDS] * N_UTTS)
    assert sig == {
        "artifact": "valid.loss.ave_3best",
        "against": "valid.loss.best",
        "wer_diff": pytest.approx(-0.1),
        "ci_low": low,
        "ci_high": high,
        "method": "paired bootstrap over utterances",
        "resamples": 1000,
        "seed": 0,
        "level": 0.95,
        "significant": True,
    }
    assert diff == pytest.approx(-0.1) and high < 0  # a real interval, entirely below 0
    assert s["selected"] == "valid.loss.ave_3best"
    assert "-10.00 points" in s["reason"] and "is significant at 95 %" in s["reason"]


def test_significance_of_a_slight_gain_is_recorded_as_not_significant():
    s = choose(SLIGHT_GAIN)
    sig = s["significance"]
    assert sig["wer_diff"] == pytest.approx(-0.002)
    assert sig["ci_low"] < 0 <= sig["ci_high"] and not sig["significant"]
    assert "is not significant at 95 %" in s["reason"]


def test_a_significantly_worse_average_is_recorded_as_significant():
    s = choose([3] * N_UTTS)
    assert s["selected"] == "valid.loss.best"
    assert s["significance"]["ci_low"] > 0 and s["significance"]["significant"]
    assert "does not beat" in s["reason"]


def test_default_keeps_an_average_that_is_better_but_not_significantly():
    """selection.require_significant off: the choice is exactly as without intervals."""
    s = choose(SLIGHT_GAIN)
    assert s["selected"] == "valid.loss.ave_3best"
    assert s["require_significant"] is False
    without = select_model(
        [ev("valid.loss.best", 0.1), ev("last", 0.2), ev("valid.loss.ave_3best", 0.098)],
        run="r",
        dev_set=DEV,
    )
    assert without["selected"] == s["selected"] and without["significance"] is None


def test_require_significant_keeps_the_single_checkpoint_without_a_significant_gain():
    s = choose(SLIGHT_GAIN, require_significant=True)
    assert s["selected"] == "valid.loss.best"
    assert s["selected_sha256"] == "sha-valid.loss.best"
    assert s["require_significant"] is True and "require_significant" in s["rule"]
    assert "is not significant" in s["reason"]
    assert "selection.require_significant keeps the single checkpoint" in s["reason"]


def test_require_significant_keeps_an_average_whose_gain_is_significant():
    s = choose(CLEAR_GAIN, require_significant=True)
    assert s["selected"] == "valid.loss.ave_3best"
    assert "is significant at 95 %, as selection.require_significant asks" in s["reason"]


def test_require_significant_needs_the_utterances_of_an_average():
    with pytest.raises(AsrflowError, match=r"run r: no per-utterance errors .*ave_3best"):
        select_model(
            [ev("valid.loss.best", 0.1), ev("valid.loss.ave_3best", 0.05)],
            run="r",
            dev_set=DEV,
            require_significant=True,
        )
    # a run without an average has nothing to test
    s = select_model([ev("last", 0.1)], run="r", dev_set=DEV, require_significant=True)
    assert s["selected"] == "last" and s["significance"] is None


def test_evaluations_of_different_utterances_are_not_paired():
    single, single_errors = scored("valid.loss.best", SINGLE)
    average, average_errors = scored("valid.loss.ave_3best", SLIGHT_GAIN)
    other = UtteranceErrors(
        np.array([f"x{i}" for i in range(N_UTTS)], dtype=object),
        average_errors.word_errors,
        average_errors.ref_words,
    )
    utterances = {"valid.loss.best": single_errors, "valid.loss.ave_3best": other}
    with pytest.raises(AsrflowError, match="did not score the same dev utterances"):
        select_model([single, average], run="r", dev_set=DEV, utterances=utterances)


def test_utterances_that_disagree_with_the_summaries_are_refused():
    single, single_errors = scored("valid.loss.best", SINGLE)
    average = ev("valid.loss.ave_3best", 0.05)  # the csv says 0.098
    utterances = {"valid.loss.best": single_errors, "valid.loss.ave_3best": errors(SLIGHT_GAIN)}
    with pytest.raises(AsrflowError, match="stale files"):
        select_model([single, average], run="r", dev_set=DEV, utterances=utterances)


def test_select_run_pairs_each_summary_with_the_utterances_csv_beside_it(tmp_path):
    contract = TextNormalization()
    refs = [f"w{i} x{i} y{i} z{i}" for i in range(40)]
    hyps = {
        "valid.loss.best": [f"w{i} x{i}" for i in range(40)],  # two deletions everywhere
        "valid.loss.ave_3best": refs,  # no errors
    }
    summaries, csvs = [], []
    for artifact, hyp in hyps.items():
        directory = tmp_path / artifact / DEV
        directory.mkdir(parents=True)
        scores = [
            score_utterance(f"u{i}", r, h, contract)
            for i, (r, h) in enumerate(zip(refs, hyp, strict=True))
        ]
        write_utterances_csv(scores, directory / "utterances.csv")
        wer = sum(s.word_errors for s in scores) / sum(s.ref_words for s in scores)
        (directory / "summary.json").write_text(json.dumps(ev(artifact, wer)))
        summaries.append(directory / "summary.json")
        csvs.append(directory / "utterances.csv")
    out = tmp_path / "selected.json"
    s = select_run(
        summaries,
        run="r",
        dev_set=DEV,
        out=out,
        utterances=csvs[::-1],  # paired by directory, not by order
        require_significant=True,
    )
    assert json.loads(out.read_text()) == s
    assert s["selected"] == "valid.loss.ave_3best"
    assert s["significance"]["wer_diff"] == pytest.approx(-0.5)
    assert s["significance"]["significant"]
    with pytest.raises(AsrflowError, match=r"no utterances\.csv given beside"):
        select_run(summaries, run="r", dev_set=DEV, out=out, utterances=csvs[:1])

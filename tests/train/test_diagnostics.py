import json

from asrflow.train.loop.diagnostics import MIN_HISTORY, Diagnostics


def test_spike_is_logged_with_its_utterance_ids(tmp_path):
    diag = Diagnostics(tmp_path, ["a"], spike_factor=3.0, spike_window=20)
    for step in range(MIN_HISTORY):
        assert not diag.observe_loss(step, 1.0 + 0.01 * step, [f"u{step}"])
    assert diag.observe_loss(50, 10.0, ["bad-utt", "other"])
    assert not diag.observe_loss(51, 1.5, ["fine"])
    records = [json.loads(x) for x in (tmp_path / "spikes.jsonl").read_text().splitlines()]
    assert len(records) == 1 and diag.num_spikes == 1
    assert records[0]["step"] == 50 and records[0]["ids"] == ["bad-utt", "other"]
    assert records[0]["factor"] > 3.0


def test_no_spike_judged_before_enough_history(tmp_path):
    diag = Diagnostics(tmp_path, [])
    assert not diag.observe_loss(0, 1.0, ["a"])
    assert not diag.observe_loss(1, 1000.0, ["b"])
    assert not (tmp_path / "spikes.jsonl").exists()


def test_transcripts_and_blank_warning(tmp_path):
    diag = Diagnostics(tmp_path, ["u1", "u2"], warmup_steps=10)
    refs = {"u1": "hello there", "u2": "bye", "u3": "x"}
    diag.on_validation(5, {"u1": "", "u2": "", "u3": ""}, refs, {"valid/wer": 1.0})
    assert diag.warnings == []  # still warming up
    text = (tmp_path / "transcripts/step0000005.txt").read_text()
    assert "u1\n  REF: hello there\n  HYP: \n" in text and "u3" not in text
    diag.on_validation(20, {"u1": "", "u2": " ", "u3": ""}, refs, {"valid/wer": 1.0})
    assert len(diag.warnings) == 1 and "tokenizer" in diag.warnings[0]
    diag.on_validation(30, {"u1": "hello", "u2": "", "u3": ""}, refs, {"valid/wer": 0.9})
    assert len(diag.warnings) == 1  # one non-empty hypothesis: no warning

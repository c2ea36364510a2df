"""Tests for asrflow.train.preflight.audit: batch statistics without audio, the CV warning,
the files."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from lhotse import CutSet

from asrflow.data.cuts import save_cuts
from asrflow.errors import AsrflowError
from asrflow.recipe.batching import Batching
from asrflow.text import TextNormalization
from asrflow.tokenizer import TokenizerConfig, train_tokenizer
from asrflow.tokens import TokenEncoder
from asrflow.train.preflight.audit import (
    BatchStats,
    audit_batches,
    batch_stats,
    describe,
    summarize,
)
from tests.cuts import audio_less_cut

NORM = TextNormalization()
# Equal durations, no shuffle: the sampler yields consecutive groups of 4 cuts (max 4 s).
BATCHING = Batching(max_duration=4.0, num_buckets=2, shuffle=False, seed=0)


def make_cuts(texts: list[str], durations: list[float] | None = None) -> CutSet:
    """Audio-less cuts (the audit never loads audio: their sources do not exist)."""
    durations = durations or [1.0] * len(texts)
    return CutSet.from_cuts(
        audio_less_cut(f"u{i:03d}", d, t, origin=f"train.jsonl:{i + 1}")
        for i, (t, d) in enumerate(zip(texts, durations, strict=True))
    )


def setup(tmp_path: Path, texts: list[str], durations: list[float] | None = None):
    cuts = make_cuts(texts, durations)
    save_cuts(cuts, tmp_path / "train.jsonl.gz")
    model, tokens = tmp_path / "bpe.model", tmp_path / "tokens.txt"
    train_tokenizer(
        tmp_path / "train.jsonl.gz", model, tokens, TokenizerConfig(model_type="char"), NORM
    )
    return SimpleNamespace(
        cuts=cuts, cuts_path=tmp_path / "train.jsonl.gz", model=model, tokens=tokens, root=tmp_path
    )


def run(env, loss_normalization: str, epochs: int = 1, batching=BATCHING) -> dict:
    out = env.root / "audit"
    return audit_batches(
        env.cuts_path, env.model, env.tokens, NORM, batching, loss_normalization,
        out / "audit.json", out / "audit.png", out / "audit.txt", epochs=epochs,
    )  # fmt: skip


# Three batches of four: tokens per batch very unequal (CV ~ 0.95).
UNEVEN = ["a b"] * 4 + ["ab " * 8] * 4 + ["abba " * 10] * 4
EVEN = ["ab ba"] * 12


def test_describe_matches_numpy():
    values = [3, 1, 4, 1, 5, 9, 2, 6]
    d = describe(values)
    x = np.array(values, dtype=float)
    assert d["mean"] == pytest.approx(x.mean())
    assert d["cv"] == pytest.approx(math.sqrt(((x - x.mean()) ** 2).mean()) / x.mean())
    assert d["median"] == pytest.approx(3.5)
    assert (d["min"], d["max"]) == (1.0, 9.0)
    assert d["p5"] == pytest.approx(np.percentile(x, 5))
    assert d["p95"] == pytest.approx(np.percentile(x, 95))
    assert describe([7, 7, 7])["cv"] == 0.0
    with pytest.raises(ValueError):
        describe([])


def test_batch_stats_padding_ratio():
    cuts = make_cuts(["a", "b", "c"], [1.0, 2.0, 4.0])
    stats = batch_stats(list(cuts), {"u000": 2, "u001": 3, "u002": 5})
    assert stats == BatchStats(tokens=10, utterances=3, audio_seconds=7.0, padded_seconds=12.0)
    assert stats.padding_ratio == pytest.approx(1 - 7 / 12)


def test_stats_of_known_batches(tmp_path: Path):
    env = setup(tmp_path, UNEVEN)
    report = run(env, "token")
    enc = TokenEncoder(env.model, env.tokens, NORM)
    per_cut = [len(enc.encode(t)) for t in UNEVEN]
    expected = np.array([sum(per_cut[i : i + 4]) for i in range(0, 12, 4)], dtype=float)
    t = report["tokens_per_batch"]
    assert report["num_batches"] == 3 and report["batches_per_epoch"] == [3]
    assert report["num_cuts"] == report["num_utterances"] == 12
    assert report["total_tokens"] == sum(per_cut)
    assert (t["min"], t["median"], t["max"]) == (
        expected.min(),
        np.median(expected),
        expected.max(),
    )
    assert t["mean"] == pytest.approx(expected.mean())
    assert t["cv"] == pytest.approx(expected.std() / expected.mean())
    assert t["cv"] > 0.5
    assert report["utterances_per_batch"]["mean"] == 4 and report["utterances_per_batch"]["cv"] == 0
    assert report["audio_seconds_per_batch"]["median"] == pytest.approx(4.0)
    assert report["padding_ratio"]["max"] == 0.0  # equal durations: no padding
    assert report["normalization_sha256"] == NORM.sha256()
    assert report["batching"]["max_duration"] == 4.0


def test_the_audit_counts_the_unk_train_targets_and_warns(tmp_path: Path, caplog):
    """Issue 30: a tokenizer that cannot spell the train text trained a run unwarned; the
    audit, which encodes every train target, reports and warns (the smoke run stops above
    diagnostics.max_unk_share: tests/train/test_unk.py)."""
    clean = setup(tmp_path / "clean", EVEN)
    assert run(clean, "token")["unk_tokens"] == {
        "split": "train",
        "tokens": 12 * len(TokenEncoder(clean.model, clean.tokens, NORM).encode(EVEN[0])),
        "unk": 0,
        "share": 0.0,
        "words": [],
        "unseen": 0,
        "unseen_words": [],
    }
    env = setup(tmp_path, EVEN)  # a tokenizer of a and b only
    save_cuts(make_cuts(["ab ca"] * 4 + ["ab ba"] * 8), env.cuts_path)
    with caplog.at_level(logging.WARNING, logger="asrflow.train.preflight.audit"):
        report = run(env, "token")
    assert report["unk_tokens"]["unk"] == 4 and report["unk_tokens"]["words"] == ["ca"]
    [warning] = report["warnings"]
    assert warning.startswith("4 of 72 train target tokens (5.56 %) are <unk>, from words such")
    assert "cannot spell them" in warning and warning in caplog.text
    text = (env.root / "audit" / "audit.txt").read_text()
    assert text.startswith(f"WARNING: {warning}") and "<unk> targets: 4 of 72 tokens" in text


def test_padding_ratio_with_mixed_durations(tmp_path: Path):
    env = setup(tmp_path, ["ab"] * 2, [1.0, 3.0])
    report = run(env, "token", batching=Batching(max_duration=10.0, num_buckets=2, shuffle=False))
    assert report["num_batches"] == 1
    assert report["padding_ratio"]["mean"] == pytest.approx(1 - 4.0 / 6.0)
    assert report["padding_share"] == pytest.approx(1 - 4.0 / 6.0)


def test_padding_share_weighs_batches_by_their_padded_audio(tmp_path: Path):
    # two batches: 1 s + 3 s (padded to 6 s) and 4 s + 4 s (no padding): the mean of the
    # batches' ratios is (2/3 + 0) / 2, the share of all padded audio 2 / 14
    env = setup(tmp_path, ["ab"] * 4, [1.0, 3.0, 4.0, 4.0])
    batching = Batching(max_duration=8.0, num_buckets=2, shuffle=False)
    report = run(env, "token", batching=batching)
    assert report["num_batches"] == 2
    assert report["padding_ratio"]["mean"] == pytest.approx((1 - 4.0 / 6.0) / 2)
    assert report["padding_share"] == pytest.approx(2.0 / 14.0)
    assert "14.3 % of the padded audio" in (env.root / "audit" / "audit.txt").read_text()


@pytest.mark.parametrize("mode", ["utterance", "sum"])
def test_warns_on_uneven_tokens_without_token_normalization(tmp_path: Path, caplog, mode):
    env = setup(tmp_path, UNEVEN)
    with caplog.at_level(logging.WARNING, logger="asrflow.train.preflight.audit"):
        report = run(env, mode)
    assert len(report["warnings"]) == 1
    warning = report["warnings"][0]
    cv = report["tokens_per_batch"]["cv"]
    assert f"CV={cv:.2f}" in warning
    assert "scale the gradient with tokens per batch" in warning
    assert "set loss.normalization: token" in warning
    assert any(r.levelno == logging.WARNING and "CV" in r.getMessage() for r in caplog.records)
    text = (tmp_path / "audit" / "audit.txt").read_text(encoding="utf-8")
    assert text.startswith("WARNING: ")


def test_no_warning_with_token_normalization(tmp_path: Path, caplog):
    env = setup(tmp_path, UNEVEN)
    with caplog.at_level(logging.WARNING, logger="asrflow.train.preflight.audit"):
        report = run(env, "token")
    assert report["warnings"] == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_no_warning_when_tokens_are_even(tmp_path: Path):
    env = setup(tmp_path, EVEN)
    report = run(env, "utterance")
    assert report["tokens_per_batch"]["cv"] == 0.0
    assert report["warnings"] == []


def test_summarize_threshold():
    def batches(tokens):
        return [BatchStats(t, 4, 4.0, 4.0) for t in tokens]

    assert summarize(batches([10, 10]), "utterance")["warnings"] == []
    assert summarize(batches([1, 9]), "utterance")["warnings"]  # cv = 0.8
    assert summarize(batches([1, 9]), "token")["warnings"] == []
    with pytest.raises(AsrflowError, match="no batches"):
        summarize([], "token")


def test_files_are_written(tmp_path: Path):
    env = setup(tmp_path, UNEVEN)
    report = run(env, "utterance", epochs=2)
    out = tmp_path / "audit"
    assert json.loads((out / "audit.json").read_text(encoding="utf-8")) == json.loads(
        json.dumps(report)
    )
    assert report["num_batches"] == 6 and report["batches_per_epoch"] == [3, 3]
    assert (out / "audit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "audit.txt").read_text(encoding="utf-8")
    for label in ("tokens per batch", "utterances per batch", "audio seconds", "padding ratio"):
        assert label in text
    assert "6 batches over 2 epoch(s)" in text
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left

    png = (out / "audit.png").read_bytes()
    run(env, "utterance", epochs=2)
    assert (out / "audit.png").read_bytes() == png  # reproducible bytes


def test_empty_token_cut_fails_naming_the_line(tmp_path: Path):
    env = setup(tmp_path, ["ab", "ba"])
    bad = make_cuts(["ab", "?!"])
    save_cuts(bad, env.cuts_path)
    with pytest.raises(AsrflowError, match=r"train.jsonl:2: cut u001"):
        run(env, "token", batching=Batching(max_duration=4.0, num_buckets=2))


def test_mismatched_token_list_fails_fast(tmp_path: Path):
    env = setup(tmp_path, UNEVEN)
    lines = env.tokens.read_text(encoding="utf-8").splitlines()
    env.tokens.write_text("\n".join([*lines[:2], lines[3], lines[2], *lines[4:]]) + "\n")
    with pytest.raises(AsrflowError, match="tokenizer/token-list mismatch"):
        run(env, "token")


def test_sampled_batches_are_the_audits_batches(tmp_path: Path):
    # the batches padding_sweep.py reads are those the audit reports: 1 + 3 s and 4 + 4 s
    from asrflow.train.preflight.audit import sampled_batches

    cuts = make_cuts(["ab"] * 4, [1.0, 3.0, 4.0, 4.0])
    settings = Batching(max_duration=8.0, num_buckets=2, shuffle=False)
    batches, per_epoch, bins = sampled_batches(cuts, settings, {c.id: 1 for c in cuts}, epochs=2)
    assert per_epoch == [2, 2]
    assert len(bins) == 1
    assert sorted((b.audio_seconds, b.padded_seconds) for b in batches[:2]) == [
        (4.0, 6.0),
        (8.0, 8.0),
    ]
    assert [b.tokens for b in batches] == [2, 2, 2, 2]

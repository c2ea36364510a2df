"""Lexicon + word-bigram CTC decoding (evaluation.decoding.mode lexicon_lm)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from asrflow.data.cuts import make_cut, save_cuts
from asrflow.errors import AsrflowError
from asrflow.evaluate.decode import Decoding, PackageModel, timed_transcribe
from asrflow.evaluate.word_lm import (
    END,
    UNK_WORD,
    BigramLM,
    WordLMDecoder,
    auto_mode,
    build_word_counts,
    count_words,
    resolve_auto,
)
from asrflow.export.package import export_package
from asrflow.tokens import TokenEncoder
from tests.tiny_model import TEXTS, Trained, tiny_once


def test_counts_are_per_sentence_with_boundaries():
    counts = count_words(["the cat", "", "the dog the"])
    assert counts["sentences"] == 2
    assert counts["unigram"] == {"the": 3, "cat": 1, "dog": 1}
    assert counts["bigram"]["<s> the"] == 2 and counts["bigram"]["the </s>"] == 1
    assert counts["bigram"]["the cat"] == 1 and counts["bigram"]["cat </s>"] == 1


def test_bigram_probabilities_sum_to_one_for_every_history():
    counts = count_words(["the cat sat", "the dog sat down", "a cat"])
    words = [*sorted(counts["unigram"]), UNK_WORD]
    lm = BigramLM(counts, words)
    for history in ["<s>", "the", "cat", "sat", "down", "a"]:
        total = sum(math.exp(lm.logp(history, w)) for w in [*words[:-1], END])
        assert total == pytest.approx(1.0), history
    # seen pairs beat unseen ones; an unseen history falls back to the unigram
    assert lm.logp("the", "cat") > lm.logp("the", "down")
    assert lm.logp("zebra", "cat") == pytest.approx(math.log(lm._p1["cat"]))


def test_train_transcripts_are_counted_with_the_training_normalization(tmp_path):
    cuts = [
        make_cut(utt_id=f"u{i}", audio=f"/x/{i}.wav", sampling_rate=16000, num_samples=16000,
                 duration=1.0, text=t)
        for i, t in enumerate(["Red, BLUE!", "red"])
    ]  # fmt: skip
    save_cuts(cuts, tmp_path / "train.jsonl.gz")
    out = tmp_path / "lm/word_counts.json"
    build_word_counts([tmp_path / "train.jsonl.gz"], {"lowercase": True}, out)
    counts = json.loads(out.read_text())
    assert counts["unigram"] == {"red": 2, "blue": 1} and counts["sentences"] == 2
    save_cuts([], tmp_path / "empty.jsonl.gz")
    with pytest.raises(AsrflowError, match="have no words"):
        build_word_counts([tmp_path / "empty.jsonl.gz"], {}, tmp_path / "x.json")


def test_auto_takes_the_lexicon_only_for_a_closed_vocabulary_told_by_dev() -> None:
    digits = {"one": 5, "two": 3, "three": 1}
    closed = auto_mode(digits, ["two", "one", "one"])
    assert closed["mode"] == "lexicon_lm" and "3 distinct train words" in closed["reason"]
    open_ = auto_mode(digits, ["two", "four", "one", "five"])
    assert open_["mode"] == "greedy_ctc" and "50.0% of the dev words (2)" in open_["reason"]
    big = auto_mode({f"w{i}": 1 for i in range(1001)}, ["w1"])
    assert big["mode"] == "greedy_ctc" and "1001 distinct" in big["reason"]


def test_the_word_lm_records_the_auto_choice_and_evaluation_resolves_it(tmp_path):
    def cuts(name: str, texts: list[str]) -> Path:
        rows = [
            make_cut(utt_id=f"{name}{i}", audio=f"/x/{i}.wav", sampling_rate=16000,
                     num_samples=16000, duration=1.0, text=t)
            for i, t in enumerate(texts)
        ]  # fmt: skip
        save_cuts(rows, tmp_path / f"{name}.jsonl.gz")
        return tmp_path / f"{name}.jsonl.gz"

    train, dev = cuts("train", ["red blue", "blue"]), cuts("dev", ["Blue red"])
    out = tmp_path / "word_counts.json"
    build_word_counts([train], {"lowercase": True}, out, dev_cuts=[dev])
    assert json.loads(out.read_text())["decoding"]["mode"] == "lexicon_lm"
    assert resolve_auto(Decoding(mode="auto"), out).mode == "lexicon_lm"
    assert resolve_auto(Decoding(mode="beam"), out).mode == "beam"
    build_word_counts([train], {"lowercase": True}, out)  # made for mode lexicon_lm: no choice
    with pytest.raises(AsrflowError, match="rerun rule word_lm"):
        resolve_auto(Decoding(mode="auto"), out)
    with pytest.raises(AsrflowError, match="resolved from the run's word LM"):
        PackageModel(tmp_path, Decoding(mode="auto"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return tiny_once(tmp_path_factory)


@pytest.fixture(scope="module")
def package(trained: Trained, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkg") / "tiny"
    export_package(
        state_dict_or_checkpoint=trained.lightning_ckpt, espnet_args=trained.args,
        bpe_model=trained.bpe_model, tokens_txt=trained.tokens, out_dir=out, artifact="last",
    )  # fmt: skip
    return out


def _write_counts(path: Path, sentences) -> Path:
    path.write_text(json.dumps(count_words(sentences)), encoding="utf-8")
    return path


def _emissions(encoder: TokenEncoder, frames: list[dict[str, float]]) -> torch.Tensor:
    """Log-probabilities with the given probability mass on tokens per frame (rest on blank)."""
    out = torch.full((len(frames), encoder.vocab_size), 1e-6)
    for t, frame in enumerate(frames):
        for piece, p in frame.items():
            out[t, encoder.tokens.index(piece)] = p
        out[t, encoder.blank_id] = max(1e-6, 1.0 - sum(frame.values()))
    return (out / out.sum(-1, keepdim=True)).log()


def test_the_lexicon_turns_a_near_miss_into_the_word(trained, tmp_path):
    encoder = TokenEncoder(trained.bpe_model, trained.tokens)
    counts = _write_counts(tmp_path / "counts.json", TEXTS)
    decoder = WordLMDecoder(counts, encoder, beam_size=10, word_score=0.0, lm_weight=0.0)
    assert encoder.spell("red") == ["▁", "r", "e", "d"]  # the char tokenizer
    # greedy would read "rbd": one frame prefers a letter that makes no word
    frames = [{"▁": 0.9}, {"r": 0.9}, {"b": 0.5, "e": 0.4}, {"d": 0.9}]
    log_probs = _emissions(encoder, frames)
    greedy = encoder.decode(log_probs.argmax(-1).tolist())
    assert greedy == "rbd"
    assert decoder(log_probs) == "red"


def test_lexicon_lm_mode_decodes_the_package_with_the_run_word_lm(package, trained, tmp_path):
    counts = _write_counts(tmp_path / "counts.json", TEXTS)
    decoding = Decoding(device="cpu", mode="lexicon_lm", beam_size=10)
    model = PackageModel(package, decoding, counts)
    hyps, _ = timed_transcribe(model, trained.audio, model.sample_rate, 60)
    assert hyps == list(TEXTS)
    # a word the train transcripts lack cannot be output
    only_red = _write_counts(tmp_path / "red.json", ["red"])
    hyps, _ = timed_transcribe(
        PackageModel(package, decoding, only_red), trained.audio, model.sample_rate, 60
    )
    assert all(set(h.split()) <= {"red"} for h in hyps) and hyps[0] == "red"
    with pytest.raises(AsrflowError, match="needs the run's word LM"):
        PackageModel(package, decoding)


def test_the_decoding_fingerprint_follows_what_decides_the_transcripts():
    base = Decoding(mode="lexicon_lm")
    assert base.sha256("lm1") == Decoding(mode="lexicon_lm", device="cpu", batch_seconds=0).sha256(
        "lm1"
    )
    assert base.sha256("lm1") != base.sha256("lm2")  # another word LM
    assert base.sha256("lm1") != Decoding(mode="lexicon_lm", lm_weight=0.3).sha256("lm1")
    assert Decoding().sha256() == Decoding(lm_weight=0.3).sha256()  # not a greedy setting
    assert Decoding().sha256() != Decoding(dtype="float32").sha256()


def test_evaluate_artifact_with_the_word_lm_reports_its_oov_rate(
    package, trained, tmp_path, caplog
):
    from asrflow.evaluate.stages import evaluate_artifact
    from asrflow.text import TextNormalization
    from tests.evaluate.test_decode import _eval_set

    counts = count_words(TEXTS)
    counts["normalization"] = TextNormalization().to_dict()
    word_lm = tmp_path / "counts.json"
    word_lm.write_text(json.dumps(counts), encoding="utf-8")
    out = tmp_path / "eval"
    summary = evaluate_artifact(
        package, _eval_set(trained, tmp_path), run="tiny", artifact="last", eval_set="toy.dev",
        contract=TextNormalization(), slice_fields=[], threads=1, word_lm=word_lm,
        decoding=Decoding(device="cpu", mode="lexicon_lm", beam_size=10),
        summary_path=out / "summary.json", utterances_csv=out / "u.csv",
        alignments_txt=out / "a.txt",
    )  # fmt: skip
    # references "Red.", "BLUE", "red, blue!", "blue red green": only "green" is unseen
    assert (summary["oov_words"], summary["oov_rate"]) == (1, pytest.approx(1 / 7))
    assert summary["deletions"] == 1 and summary["wer"] == pytest.approx(1 / 7)
    assert "not in the run's train transcripts" in caplog.text

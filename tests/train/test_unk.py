"""asrflow.train.preflight.unk and the smoke run's check of it: <unk> targets counted per split
before training, a tokenizer that cannot spell a run's text refused (issue 30)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lhotse import CutSet

from asrflow.data.cuts import save_cuts
from asrflow.errors import AsrflowError
from asrflow.recipe.load import load_recipe
from asrflow.text import TextNormalization
from asrflow.tokenizer import TokenizerConfig, train_tokenizer
from asrflow.tokens import TokenEncoder
from asrflow.train.preflight.smoke import check_targets, smoke_run
from asrflow.train.preflight.unk import UnkCount, check_unk, count_unk
from asrflow.train.spec import RunSpec
from tests.cuts import audio_less_cut
from tests.train.tiny_espnet import TINY_CTC_MODEL

NORM = TextNormalization()
ENGLISH = ["the cat sat on the mat", "a dog ran home", "hello there general"] * 4
RUN_TEXT = ["señor müller sat on the mat", "the cat ran home"] * 6  # ñ, ü: not in ENGLISH


def write_cuts(path: Path, texts: list[str]) -> Path:
    cuts = (
        audio_less_cut(f"{path.stem}-{i}", text=t, origin=f"m:{i}") for i, t in enumerate(texts)
    )
    save_cuts(CutSet.from_cuts(cuts), path)
    return path


def tokenizer(root: Path, texts: list[str]) -> tuple[Path, Path]:
    corpus = write_cuts(root / "tokenizer_text.jsonl.gz", texts)
    model, tokens = root / "bpe.model", root / "tokens.txt"
    train_tokenizer(corpus, model, tokens, TokenizerConfig(model_type="char"), NORM)
    return model, tokens


def spec(
    tmp_path: Path, train: list[str], dev: list[str], tokenizer_text: list[str], **diagnostics
) -> RunSpec:
    model, tokens = tokenizer(tmp_path, tokenizer_text)
    recipe = {**TINY_CTC_MODEL, "diagnostics": diagnostics}
    return RunSpec(
        name="r",
        recipe=load_recipe(recipe),
        train_cuts=[str(write_cuts(tmp_path / "train.jsonl.gz", train))],
        dev_cuts=str(write_cuts(tmp_path / "dev.jsonl.gz", dev)),
        bpe_model=str(model),
        tokens=str(tokens),
        normalization=NORM.to_dict(),
    )


def test_unknown_words_are_the_words_spelt_with_unk(tmp_path) -> None:
    enc = TokenEncoder(*tokenizer(tmp_path, ENGLISH), NORM)
    assert enc.unknown_words("Señor MÜLLER, the cat; señor") == [
        ("señor", 1),
        ("müller", 1),
        ("señor", 1),
    ]
    count = count_unk(RUN_TEXT, enc, "train")
    assert (count.unk, count.unseen) == (12, 0)
    assert count.tokens == sum(len(enc.encode(t)) for t in RUN_TEXT)
    assert count.to_dict()["words"] == ["müller", "señor"]  # as often: alphabetically


def test_a_tokenizer_from_another_corpus_stops_the_smoke_run_before_it_trains(tmp_path) -> None:
    """Issue 30: such a run trained to the end with 72 of 824 target tokens <unk>, unwarned."""
    run = spec(tmp_path, RUN_TEXT, RUN_TEXT[:2], ENGLISH)
    work = tmp_path / "smoke"
    with pytest.raises(AsrflowError) as info:
        smoke_run(run, work, tmp_path / "summary.json")
    message = str(info.value)
    assert message.startswith("run r: 12 of 270 train target tokens (4.44 %) are <unk>, ")
    assert "from words such as 'müller', 'señor'" in message
    assert "more than diagnostics.max_unk_share (0.1 %)" in message
    assert f"the tokenizer {run.bpe_model} cannot spell them" in message
    assert "Train the tokenizer on this run's corpus" in message
    assert "runs.r.overrides" in message
    assert not (work / "train").exists() and not (tmp_path / "summary.json").exists()


def test_below_the_limit_the_unk_targets_are_a_warning(tmp_path, caplog) -> None:
    run = spec(tmp_path, RUN_TEXT, ENGLISH[:3], ENGLISH, max_unk_share=0.06)
    found = check_targets(run)
    assert found["unk_tokens"]["train"]["unk"] == 12
    assert found["unk_tokens"]["dev"] == {
        "split": "dev",
        "tokens": found["unk_tokens"]["dev"]["tokens"],
        "unk": 0,
        "share": 0.0,
        "words": [],
        "unseen": 0,
        "unseen_words": [],
    }
    [warning] = found["warnings"]
    assert warning.startswith("12 of 270 train target tokens (4.44 %) are <unk>")
    assert "run r: 12 of 270" in caplog.text
    clean = spec(tmp_path, ENGLISH, ENGLISH[:3], ENGLISH)
    assert check_targets(clean)["warnings"] == []


def test_the_dev_split_is_checked_too(tmp_path) -> None:
    """The train split has one ü (under 0.1 %: allowed), the dev split many: a tokenizer that
    was not trained on this run's text, refused for dev."""
    train = ENGLISH * 20 + ["müller"]
    dev = ["müller sat on the mat"] * 3
    run = spec(tmp_path, train, dev, ENGLISH)
    with pytest.raises(AsrflowError, match=r"^run r: 3 of \d+ dev target tokens \(.* %\) are "):
        check_targets(run)


def test_dev_words_with_characters_no_train_transcript_has_only_warn(tmp_path) -> None:
    """No tokenizer trained on the train split could spell them: the data's, not the
    tokenizer's (the validation warns of such characters)."""
    run = spec(tmp_path, ENGLISH, ["señor sat on the mat", "the cat"], ENGLISH)
    found = check_targets(run)
    assert found["unk_tokens"]["dev"]["share"] == 0.0
    assert found["unk_tokens"]["dev"]["unseen_words"] == ["señor"]
    [warning] = found["warnings"]
    assert "in words with a character no train transcript has, such as 'señor'" in warning


def test_the_limit_is_a_share_of_the_tokens(tmp_path) -> None:
    enc = TokenEncoder(*tokenizer(tmp_path, ENGLISH), NORM)
    count = UnkCount("train")
    count.add(enc, "señor", enc.encode("señor"))
    assert count.share == pytest.approx(1 / len(enc.encode("señor")))
    assert check_unk(count, 1.0, "r", "m") == [
        "1 of 6 train target tokens (16.67 %) are <unk>, from words such as 'señor': the "
        "tokenizer m cannot spell them, so the model cannot learn to write them; train the "
        "tokenizer on this run's corpus if they matter"
    ]
    with pytest.raises(AsrflowError, match=r"more than diagnostics.max_unk_share \(10 %\)"):
        check_unk(count, 0.1, "r", "m")
    assert check_unk(UnkCount("dev"), 0.0, "r", "m") == []
    # a fine-tuning run's copy of its starting model's tokenizer: the remedy is another one
    with pytest.raises(
        AsrflowError,
        match=r"tokenizer: init\) cannot spell them\. Name a "
        r"tokenizer trained on this run's corpus in runs\.r\.tokenizer",
    ):
        check_unk(count, 0.1, "r", "results/runs/r/tokenizer/bpe.model")

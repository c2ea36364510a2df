"""Tests for asrflow.export.package_tokenizer: ``tokenizer: init`` takes the starting model's
tokenizer and reports the run's text it cannot spell."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from asrflow.data.cuts import save_cuts
from asrflow.errors import AsrflowError
from asrflow.export.package_tokenizer import take_package_tokenizer
from tests.test_tokens import NORM, make_tokenizer, text_cuts


def _package(root: Path, *, beside: bool = True, **config) -> Path:
    """A package with a char tokenizer of "one two three": bpe.model beside its config.yaml
    (asrflow's layout), or elsewhere and named by ``bpemodel`` (an ESPnet experiment's)."""
    model, tokens = make_tokenizer(root / "tok", ["one two three"])
    package = root / "pkg"
    package.mkdir()
    token_list = tokens.read_text(encoding="utf-8").splitlines()
    if beside:
        (package / "bpe.model").write_bytes(model.read_bytes())
    else:
        config.setdefault("bpemodel", str(model))
    text = yaml.safe_dump({"token_list": token_list, "token_type": "bpe", **config})
    (package / "config.yaml").write_text(text, encoding="utf-8")
    return package


def _split(path: Path, texts: list[str]) -> Path:
    save_cuts(text_cuts(texts), path)
    return path


@pytest.mark.parametrize("beside", [True, False])
def test_the_models_tokenizer_is_copied_and_its_coverage_counted(tmp_path, beside) -> None:
    package = _package(tmp_path, beside=beside)
    splits = {
        "train_0": _split(tmp_path / "train.jsonl.gz", ["one two", "three"]),
        "dev": _split(tmp_path / "dev.jsonl.gz", ["one"]),
    }
    out = tmp_path / "out"
    summary = take_package_tokenizer(package, out / "bpe.model", out / "tokens.txt", splits, NORM)
    assert (out / "bpe.model").read_bytes() == (tmp_path / "tok/bpe.model").read_bytes()
    assert (out / "tokens.txt").read_text() == (tmp_path / "tok/tokens.txt").read_text()
    assert summary["source"]["tokens"] == len((out / "tokens.txt").read_text().splitlines())
    for split, n in (("train_0", 2), ("dev", 1)):
        assert summary["coverage"][split]["utterances"] == n
        assert summary["coverage"][split]["utterances_with_unknown"] == 0


def test_text_the_tokenizer_cannot_spell_is_reported_per_split(tmp_path, caplog) -> None:
    package = _package(tmp_path)
    splits = {
        "train_0": _split(tmp_path / "train.jsonl.gz", ["one zebra", "two", "quiz one"]),
        "dev": _split(tmp_path / "dev.jsonl.gz", ["three"]),
    }
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        summary = take_package_tokenizer(
            package, out / "bpe.model", out / "tokens.txt", splits, NORM
        )
    train = summary["coverage"]["train_0"]
    assert train["utterances_with_unknown"] == 2
    assert set(train["unknown_words"]) == {"zebra", "quiz"}
    # the letters of "one two three" are known; these are not
    assert train["unknown_characters"] == sorted(set("zebraquiz") - set("onetwothree"))
    assert train["examples"] == ["c000", "c002"]
    assert summary["coverage"]["dev"]["utterances_with_unknown"] == 0
    assert "train_0: 2 of 3 utterances" in caplog.text and "dev:" not in caplog.text


def test_a_model_without_a_tokenizer_names_what_to_do(tmp_path) -> None:
    out = tmp_path / "out"
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model.pth").write_bytes(b"")
    with pytest.raises(AsrflowError, match=r"has no config\.yaml.*name a tokenizer"):
        take_package_tokenizer(bare, out / "bpe.model", out / "tokens.txt", {}, NORM)
    char = _package(tmp_path / "char", beside=False, bpemodel=None, token_type="char")
    with pytest.raises(AsrflowError, match=r"names no bpemodel \(token_type 'char'\)"):
        take_package_tokenizer(char, out / "bpe.model", out / "tokens.txt", {}, NORM)
    gone = _package(tmp_path / "gone", beside=False, bpemodel="data/token_list/bpe.model")
    with pytest.raises(AsrflowError, match=r"bpemodel 'data/token_list/bpe.model' exists neither"):
        take_package_tokenizer(gone, out / "bpe.model", out / "tokens.txt", {}, NORM)
    assert not out.exists()


def test_a_tokenizer_that_does_not_belong_to_the_token_list_is_refused(tmp_path) -> None:
    package = _package(tmp_path)
    config = yaml.safe_load((package / "config.yaml").read_text())
    config["token_list"] = [*config["token_list"][:-1], "x", "<sos/eos>"]
    (package / "config.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    with pytest.raises(AsrflowError, match=r"does not belong to the token_list .* token ID"):
        take_package_tokenizer(package, out / "bpe.model", out / "tokens.txt", {}, NORM)
    assert not out.exists()

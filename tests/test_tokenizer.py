"""Tests for asrflow.tokenizer: deterministic SentencePiece training on the train split only."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sentencepiece as spm
from lhotse import CutSet

from asrflow.data.cuts import save_cuts
from asrflow.errors import AsrflowError
from asrflow.text import TextNormalization, normalize
from asrflow.tokenizer import (
    BLANK,
    SOS_EOS,
    UNK,
    WORD_BOUNDARY,
    TokenizerConfig,
    auto_tokenizer,
    token_list,
    train_tokenizer,
)
from tests.cuts import audio_less_cut

# Train text avoids the letters q, w, x, z, v, k entirely (dev-only words use them).
TRAIN_TEXTS = [
    "Hola, ¿cómo estás?",
    "Muy bien, gracias.",
    "El perro come la comida de la casa.",
    "La casa es grande y bonita.",
    "Mañana iremos al mercado temprano.",
    "Los niños juegan en el jardín.",
    "Ella canta una canción bonita.",
    "Tengo hambre, ¿tienes pan?",
    "El tren llega a las ocho.",
    "Nosotros hablamos español e inglés.",
]
DEV_TEXTS = ["zyxwv qqqq kiwi", "wxyz vaqz"]


def make_cuts(texts: list[str], prefix: str, repeat: int = 1) -> CutSet:
    """Audio-less cuts following asrflow's conventions (one supervision, custom fields)."""
    return CutSet.from_cuts(
        audio_less_cut(
            f"{prefix}-{r}-{i:03d}", 1.0 + 0.1 * len(t) / 10, t, speaker=f"spk{i % 3}",
            origin=f"{prefix}.jsonl:{i + 1}",
        )
        for r in range(repeat)
        for i, t in enumerate(texts)
    )  # fmt: skip


@pytest.fixture
def train_path(tmp_path: Path) -> Path:
    path = tmp_path / "train.jsonl.gz"
    save_cuts(make_cuts(TRAIN_TEXTS, "train", repeat=5), path)
    return path


def train(train_path: Path, out: Path, config: TokenizerConfig, **kw) -> tuple[Path, Path, dict]:
    model, tokens = out / "bpe.model", out / "tokens.txt"
    summary = train_tokenizer(train_path, model, tokens, config, TextNormalization(), **kw)
    return model, tokens, summary


def train_chars() -> set[str]:
    return {c for t in TRAIN_TEXTS for c in normalize(t)} - {" "}


@pytest.mark.parametrize("model_type", ["unigram", "bpe", "char"])
def test_deterministic_bytes(train_path: Path, tmp_path: Path, model_type: str) -> None:
    config = TokenizerConfig(model_type=model_type, vocab_size=60)
    m1, t1, s1 = train(train_path, tmp_path / "a", config)
    m2, t2, s2 = train(train_path, tmp_path / "b", config)
    assert m1.read_bytes() == m2.read_bytes()
    assert t1.read_bytes() == t2.read_bytes()
    assert s1 == s2
    # No temporary path leaks into the model.
    assert b"/tmp" not in m1.read_bytes() and str(tmp_path).encode() not in m1.read_bytes()


def test_rewrite_keeps_mtime(train_path: Path, tmp_path: Path) -> None:
    config = TokenizerConfig(vocab_size=60)
    model, tokens, _ = train(train_path, tmp_path, config)
    before = (model.stat().st_mtime_ns, tokens.stat().st_mtime_ns)
    train(train_path, tmp_path, config)
    assert (model.stat().st_mtime_ns, tokens.stat().st_mtime_ns) == before


@pytest.mark.parametrize("model_type", ["unigram", "bpe", "char"])
def test_token_list_convention(train_path: Path, tmp_path: Path, model_type: str) -> None:
    config = TokenizerConfig(model_type=model_type, vocab_size=60, user_symbols=("<noise>",))
    model, tokens_path, summary = train(train_path, tmp_path, config)
    tokens = tokens_path.read_text(encoding="utf-8").splitlines()
    assert tokens == token_list(model)
    assert tokens[0] == BLANK and tokens[1] == UNK and tokens[-1] == SOS_EOS
    assert len(tokens) == len(set(tokens)), "every token exactly once"
    assert "<noise>" in tokens
    sp = spm.SentencePieceProcessor(model_file=str(model))
    # Every piece of the model is in the list once, at its SentencePiece id.
    assert len(tokens) == sp.get_piece_size() + 1
    for i in range(sp.get_piece_size()):
        assert tokens[i] == sp.id_to_piece(i)
    assert sp.unk_id() == 1 and sp.pad_id() == 0 and sp.bos_id() == -1 and sp.eos_id() == -1
    # ESPnet's path: text -> pieces (model) -> ids (list); every train piece is in the list.
    index = {t: i for i, t in enumerate(tokens)}
    for t in TRAIN_TEXTS:
        for piece in sp.encode(normalize(t), out_type=str):
            assert piece in index
    assert summary["num_tokens"] == len(tokens)
    assert summary["vocab_size"] == sp.get_piece_size()
    assert summary["char_coverage"] == 1.0
    assert summary["unk_rate"] == 0.0
    assert summary["num_sentences"] == len(TRAIN_TEXTS) * 5


def test_model_types(train_path: Path, tmp_path: Path) -> None:
    _, char_tokens, _ = train(train_path, tmp_path / "c", TokenizerConfig("char"))
    pieces = char_tokens.read_text(encoding="utf-8").splitlines()[2:-1]
    # char: exactly the train characters plus the word-boundary mark, whatever vocab_size says.
    assert set(pieces) == train_chars() | {WORD_BOUNDARY}
    bpe_model, bpe_tokens, _ = train(train_path, tmp_path / "b", TokenizerConfig("bpe", 60))
    assert len(bpe_tokens.read_text(encoding="utf-8").splitlines()) == 61
    assert any(len(p.replace(WORD_BOUNDARY, "")) > 1 for p in token_list(bpe_model))


@pytest.mark.parametrize("model_type", ["unigram", "bpe", "char"])
def test_never_sees_dev_text(train_path: Path, tmp_path: Path, model_type: str) -> None:
    """Dev-only words leave no trace: only train characters in pieces, dev-only chars -> <unk>."""
    dev_path = tmp_path / "dev.jsonl.gz"
    save_cuts(make_cuts(DEV_TEXTS, "dev", repeat=20), dev_path)  # would dominate if seen
    model, tokens_path, _ = train(
        train_path, tmp_path, TokenizerConfig(model_type=model_type, vocab_size=60)
    )
    allowed = train_chars() | {WORD_BOUNDARY}
    dev_only = {c for t in DEV_TEXTS for c in normalize(t)} - train_chars() - {" "}
    assert dev_only >= set("zxwvqk")
    tokens = tokens_path.read_text(encoding="utf-8").splitlines()
    for piece in tokens[2:-1]:
        assert set(piece) <= allowed, f"piece {piece!r} has characters not in train text"
    assert not any(c in piece for piece in tokens[2:-1] for c in dev_only)

    sp = spm.SentencePieceProcessor(model_file=str(model))
    for word in ("qqqq", "zxwv", "kwxz"):  # only dev-only characters
        ids = sp.encode(word)
        assert ids == [sp.unk_id()] or set(ids) <= {sp.unk_id(), sp.piece_to_id(WORD_BOUNDARY)}
    for t in DEV_TEXTS:
        for i in sp.encode(normalize(t)):
            piece = sp.id_to_piece(i)
            assert i == sp.unk_id() or set(piece) <= allowed


def test_vocab_too_high(train_path: Path, tmp_path: Path) -> None:
    with pytest.raises(AsrflowError, match=r"tokenizers\.es_small\.vocab_size") as info:
        train(train_path, tmp_path, TokenizerConfig(vocab_size=5000), name="es_small")
    assert "at most" in str(info.value)
    assert not (tmp_path / "bpe.model").exists() and not (tmp_path / "tokens.txt").exists()


def test_vocab_too_low(train_path: Path, tmp_path: Path) -> None:
    with pytest.raises(AsrflowError, match=r"tokenizers\.x\.vocab_size.*too low"):
        train(train_path, tmp_path, TokenizerConfig("bpe", vocab_size=5), name="x")


def test_empty_train_text(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl.gz"
    save_cuts(make_cuts(["", "  ¿?  ", "..."], "train"), path)
    with pytest.raises(AsrflowError, match="empty after text normalization"):
        train(path, tmp_path, TokenizerConfig())


def test_empty_cuts_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl.gz"
    save_cuts(make_cuts([*TRAIN_TEXTS, "", "?!"], "train"), path)
    _, _, summary = train(path, tmp_path, TokenizerConfig("char"))
    assert summary["num_cuts"] == len(TRAIN_TEXTS) + 2
    assert summary["num_empty"] == 2
    assert summary["num_sentences"] == len(TRAIN_TEXTS)


def test_summary_logged(train_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="asrflow.tokenizer"):
        train(train_path, tmp_path, TokenizerConfig("char"), name="chars")
    assert any("tokenizers.chars" in r.getMessage() for r in caplog.records)


def test_config_validation_and_round_trip() -> None:
    config = TokenizerConfig("bpe", 100, 0.9995, ("<noise>", "<laugh>"))
    assert TokenizerConfig.from_dict(config.to_dict()) == config
    assert TokenizerConfig.from_dict({"user_symbols": ["<x>"]}).user_symbols == ("<x>",)
    for bad in (
        {"model_type": "word"},
        {"vocab_size": 2},
        {"vocab_size": "200"},
        {"character_coverage": 0},
        {"character_coverage": 1.5},
        {"user_symbols": ["<unk>"]},
        {"user_symbols": ["a b"]},
        {"user_symbols": ["<x>", "<x>"]},
        {"vocabsize": 10},
    ):
        with pytest.raises(AsrflowError):
            TokenizerConfig.from_dict(bad)


def test_auto_spells_a_closed_small_vocabulary_in_characters_and_says_why() -> None:
    digits = ["one two three", "four five six seven", "eight nine zero oh"]
    config, reason = auto_tokenizer(TokenizerConfig(model_type="auto"), digits, hours=0.3)
    assert config.model_type == "char" and "11 distinct words" in reason


def test_auto_takes_unigram_pieces_cut_to_what_the_text_allows() -> None:
    words = [f"w{i}x{i * 7 % 13}" for i in range(150)]
    sentences = [" ".join(words[i : i + 5]) for i in range(0, 150, 5)]
    config, reason = auto_tokenizer(TokenizerConfig(model_type="auto"), sentences, hours=0.5)
    assert config.model_type == "unigram" and 3 <= config.vocab_size < 300
    assert "150 distinct words" in reason and "cut to" in reason
    unchanged = TokenizerConfig(model_type="bpe", vocab_size=50)
    assert auto_tokenizer(unchanged, sentences, hours=0.5) == (unchanged, "")

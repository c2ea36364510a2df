"""Tests for asrflow.tokens: ESPnet token IDs and the tokenizer/token-list pairing check."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import sentencepiece as spm
from lhotse import CutSet

from asrflow.data.cuts import save_cuts
from asrflow.errors import AsrflowError
from asrflow.text import TextNormalization
from asrflow.tokenizer import BLANK, SOS_EOS, UNK, TokenizerConfig, train_tokenizer
from asrflow.tokens import IGNORE_ID, TokenEncoder, TokenListMismatch
from tests.cuts import audio_less_cut

NORM = TextNormalization()
TEXTS = ["Hello there, general.", "The hotel is near the lake.", "A green tea, then another."]


def text_cuts(texts: list[str]) -> CutSet:
    """Audio-less cuts with one supervision each (the tokenizer reads only the text)."""
    return CutSet.from_cuts(
        audio_less_cut(f"c{i:03d}", text=t, origin=f"m:{i}") for i, t in enumerate(texts)
    )


def make_tokenizer(
    root: Path, texts: list[str], config: TokenizerConfig | None = None
) -> tuple[Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    save_cuts(text_cuts(texts), root / "train.jsonl.gz")
    model, tokens = root / "bpe.model", root / "tokens.txt"
    train_tokenizer(
        root / "train.jsonl.gz", model, tokens, config or TokenizerConfig(model_type="char"), NORM
    )
    return model, tokens


@pytest.fixture
def char_tok(tmp_path: Path) -> tuple[Path, Path]:
    return make_tokenizer(tmp_path / "char", TEXTS)


def test_encode_normalizes_and_ids_are_sentencepiece_ids(char_tok):
    model, tokens = char_tok
    enc = TokenEncoder(model, tokens, NORM)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    ids = enc.encode("  HELLO,   there!")
    assert ids == sp.encode("hello there")
    assert enc.decode(ids) == "hello there"
    assert enc.pieces("Hello") == sp.encode("hello", out_type=str)


def test_special_ids_and_vocab(char_tok):
    model, tokens = char_tok
    enc = TokenEncoder(model, tokens, NORM)
    lines = tokens.read_text(encoding="utf-8").splitlines()
    assert enc.vocab_size == len(lines)
    assert enc.blank_id == 0 and lines[0] == BLANK
    assert enc.unk_id == 1 and lines[1] == UNK
    assert enc.sos_eos_id == len(lines) - 1 and lines[-1] == SOS_EOS
    assert enc.ignore_id == IGNORE_ID == -1


def test_unknown_characters_map_to_unk(char_tok):
    model, tokens = char_tok
    enc = TokenEncoder(model, tokens, NORM)
    # q, u, z never appear in the training text; SentencePiece merges a run of unknown
    # characters into one piece ("qu"), which is not in the list either: one <unk> per run.
    assert enc.pieces("quiz")[1:] == ["qu", "i", "z"]
    ids = enc.encode("quiz")
    assert ids.count(enc.unk_id) == 2
    assert all(0 <= i < enc.vocab_size for i in ids)
    assert enc.decode(ids) == "<unk>i<unk>"


def test_empty_text_encodes_to_nothing(char_tok):
    enc = TokenEncoder(*char_tok, NORM)
    assert enc.encode("") == []
    assert enc.encode(" ?! ") == []


def test_decode_drops_blank_sos_eos_and_padding(char_tok):
    enc = TokenEncoder(*char_tok, NORM)
    ids = enc.encode("the lake")
    noisy = [enc.blank_id, *ids[:3], enc.blank_id, *ids[3:], enc.sos_eos_id, IGNORE_ID, IGNORE_ID]
    assert enc.decode(noisy) == "the lake"
    assert enc.decode([]) == ""
    with pytest.raises(ValueError, match="outside the token list"):
        enc.decode([enc.vocab_size])


def test_unigram_roundtrip(tmp_path: Path):
    model, tokens = make_tokenizer(
        tmp_path / "uni", TEXTS * 3, TokenizerConfig(model_type="unigram", vocab_size=28)
    )
    enc = TokenEncoder(model, tokens, NORM)
    assert enc.decode(enc.encode("The hotel, then the lake!")) == "the hotel then the lake"


def test_pickles_for_dataloader_workers(char_tok):
    enc = TokenEncoder(*char_tok, NORM)
    clone = pickle.loads(pickle.dumps(enc))
    assert clone.encode("hello there") == enc.encode("hello there")
    assert clone.decode(enc.encode("near")) == "near"


def test_tokens_from_another_tokenizer_are_refused(tmp_path: Path, char_tok):
    model, _ = char_tok
    _, other_tokens = make_tokenizer(tmp_path / "other", ["xyz wvu", "quick box"])
    with pytest.raises(AsrflowError) as err:
        TokenEncoder(model, other_tokens, NORM)
    msg = str(err.value)
    assert "tokenizer/token-list mismatch" in msg
    assert str(model) in msg and str(other_tokens) in msg
    assert "retrain the tokenizer or point the run at the matching tokens.txt" in msg


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: [*t[:3], t[2], *t[3:]], "appears twice"),
        (lambda t: [*t[:2], t[3], t[2], *t[4:]], "model's order needs"),
        (lambda t: [*t[:2], *t[3:]], "missing from the list"),
        (lambda t: [*t[:-1], "extra", t[-1]], "not in the model"),
        (lambda t: t[:-1], "missing from the list"),
    ],
    ids=["duplicate", "swapped", "missing", "extra", "no-sos-eos"],
)
def test_edited_token_lists_are_refused(tmp_path: Path, char_tok, edit, expected):
    model, tokens = char_tok
    lines = tokens.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad_tokens.txt"
    bad.write_text("\n".join(edit(lines)) + "\n", encoding="utf-8")
    with pytest.raises(AsrflowError, match=expected):
        TokenEncoder(model, bad, NORM)


def test_missing_files_are_user_errors(tmp_path: Path, char_tok):
    model, tokens = char_tok
    with pytest.raises(AsrflowError, match="cannot read the token list"):
        TokenEncoder(model, tmp_path / "nope.txt", NORM)
    with pytest.raises(AsrflowError, match="cannot load the SentencePiece model"):
        TokenEncoder(tmp_path / "nope.model", tokens, NORM)


def test_a_mismatch_names_both_files_and_the_first_differing_id(tmp_path: Path, char_tok):
    model, tokens = char_tok
    lines = tokens.read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad_tokens.txt"
    bad.write_text("\n".join([*lines[:4], lines[5], lines[4], *lines[6:]]) + "\n", "utf-8")
    with pytest.raises(TokenListMismatch) as err:
        TokenEncoder(model, bad, NORM)
    msg = str(err.value)
    assert str(model) in msg and str(bad) in msg
    assert (
        f"the lists first differ at token ID 4, line 5: {lines[5]!r} in bad_tokens.txt, "
        f"{lines[4]!r} from the model's pieces"
    ) in msg
    short = tmp_path / "short.txt"
    short.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    end = rf"token ID {len(lines) - 1}, line {len(lines)}: \(end of list\) in short\.txt"
    with pytest.raises(TokenListMismatch, match=end):
        TokenEncoder(model, short, NORM)


def _package_with(root: Path, bpe_model: Path, tokens: Path) -> Path:
    """A package directory whose package.json vouches for the given tokenizer files."""
    import hashlib
    import json
    import shutil

    from asrflow.export.package import BPE_MODEL, CONFIG, MANIFEST, MODEL, TOKENS

    root.mkdir(parents=True)
    shutil.copyfile(bpe_model, root / BPE_MODEL)
    shutil.copyfile(tokens, root / TOKENS)
    (root / CONFIG).write_text("{}\n", encoding="utf-8")
    (root / MODEL).write_bytes(b"never read")
    names = (CONFIG, MODEL, BPE_MODEL, TOKENS)
    files = {n: hashlib.sha256((root / n).read_bytes()).hexdigest() for n in names}
    (root / MANIFEST).write_text(json.dumps({"files": files}), encoding="utf-8")
    return root


def test_evaluation_refuses_a_package_whose_tokenizer_and_token_list_differ(
    tmp_path: Path, char_tok
):
    """Where the two meet at evaluation (the package's own files), before any model is built."""
    from asrflow.evaluate.decode import Decoding, PackageModel

    model, _ = char_tok
    _, other_tokens = make_tokenizer(tmp_path / "other", ["xyz wvu", "quick box"])
    pkg = _package_with(tmp_path / "pkg", model, other_tokens)
    with pytest.raises(TokenListMismatch) as err:
        PackageModel(pkg, Decoding(device="cpu"))
    msg = str(err.value)
    assert str(pkg / "bpe.model") in msg and str(pkg / "tokens.txt") in msg
    assert "the lists first differ at token ID" in msg

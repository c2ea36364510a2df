"""A tiny CTC model really trained on four spoken utterances, for the export and evaluation tests.

:func:`train_tiny` trains a ~36 k-parameter transformer until greedy CTC transcribes its four
eSpeak utterances (``TEXTS``); packages exported from it must then decode the same text through
every path (ESPnet's ``Speech2Text``, the evaluate rule's greedy path, bf16 or fp32). Test modules
take it from :func:`tiny_once`: trained once per test session, a copy for each module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from asrflow.corpus.espeak import native_sample_rate, resample, synthesize
from asrflow.data.cuts import save_cuts
from asrflow.text import TextNormalization
from asrflow.tokenizer import TokenizerConfig, train_tokenizer
from asrflow.tokens import TokenEncoder, greedy_ctc
from asrflow.train.loop.model import build_model
from tests.cuts import audio_less_cut
from tests.e2e import built_once

TEXTS = ("red", "blue", "red blue", "blue red")
MAX_STEPS = 300

TINY_MODEL: dict[str, Any] = {
    "frontend": "default",
    "frontend_conf": {"n_fft": 512, "win_length": 400, "hop_length": 80, "n_mels": 40},
    "specaug": None,
    "normalize": "utterance_mvn",
    "encoder": "transformer",
    "encoder_conf": {
        "output_size": 32,
        "attention_heads": 2,
        "linear_units": 64,
        "num_blocks": 2,
        "dropout_rate": 0.0,
        "positional_dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
        "input_layer": "conv2d",
    },
    "model_conf": {"ctc_weight": 1.0, "report_cer": False, "report_wer": False},
}
"""A ~36 k-parameter CTC-only transformer (5 ms frames, 20 ms after conv2d subsampling)."""


@dataclass
class Trained:
    model: torch.nn.Module
    args: Any
    audio: list[np.ndarray]
    transcripts: list[str]
    """The in-memory model's greedy CTC output on ``audio``."""
    bpe_model: Path
    tokens: Path
    lightning_ckpt: Path
    state_dict: Path


def char_tokenizer(directory: Path) -> tuple[Path, Path]:
    """asrflow's own SentencePiece char tokenizer over TEXTS, and its token list."""
    cuts = directory / "texts.jsonl.gz"
    save_cuts([audio_less_cut(f"t{i}", text=text) for i, text in enumerate(TEXTS)], cuts)
    bpe, tokens = directory / "bpe.model", directory / "tokens.txt"
    train_tokenizer(cuts, bpe, tokens, TokenizerConfig(model_type="char"), TextNormalization())
    return bpe, tokens


def batch(audio: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    speech = torch.zeros(len(audio), max(len(a) for a in audio))
    for i, a in enumerate(audio):
        speech[i, : len(a)] = torch.from_numpy(a)
    return speech, torch.tensor([len(a) for a in audio])


def greedy(model: torch.nn.Module, speech, lengths, enc: TokenEncoder) -> list[str]:
    model.eval()
    with torch.no_grad():
        out, out_lens = model.encode(speech, lengths)
        best = model.ctc.argmax(out)
    model.train()
    return [enc.decode(ids) for ids in greedy_ctc(best, out_lens, enc.blank_id)]


def train_tiny(d: Path) -> Trained:
    """Train the tiny model until greedy CTC transcribes TEXTS (about 10 s on 2 cores)."""
    bpe, tokens = char_tokenizer(d)
    enc = TokenEncoder(bpe, tokens)
    torch.manual_seed(0)
    model, args = build_model(TINY_MODEL, tokens, bpe)
    rate = native_sample_rate()
    audio = [
        (resample(synthesize(t, "en+m3", rate=170), rate, 16000) / 32768).astype(np.float32)
        for t in TEXTS
    ]
    speech, lengths = batch(audio)
    ids = [enc.encode(t) for t in TEXTS]
    text = torch.full((len(ids), max(map(len, ids))), enc.ignore_id, dtype=torch.long)
    for i, row in enumerate(ids):
        text[i, : len(row)] = torch.tensor(row)
    text_lengths = torch.tensor([len(row) for row in ids])

    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    transcripts: list[str] = []
    for step in range(1, MAX_STEPS + 1):
        loss = model(speech, lengths, text.clone(), text_lengths)[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            transcripts = greedy(model, speech, lengths, enc)
            if transcripts == list(TEXTS):
                break
    assert transcripts == list(TEXTS), f"the tiny model did not learn in {MAX_STEPS} steps"
    model.eval()

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    lightning_ckpt = d / "last.ckpt"
    torch.save(
        {
            "epoch": 0,
            "global_step": step,
            "state_dict": {f"model.{k}": v for k, v in state.items()},
            "optimizer_states": [],
            "asrflow_data": {"epoch": 0, "batches_in_epoch": step},
        },
        lightning_ckpt,
    )
    plain = d / "weights.pth"
    torch.save(state, plain)
    np.savez(d / AUDIO, *audio)
    return Trained(model, args, audio, transcripts, bpe, tokens, lightning_ckpt, plain)


AUDIO = "audio.npz"


def load_tiny(d: Path) -> Trained:
    """The model :func:`train_tiny` wrote to ``d``, loaded back from its files."""
    bpe, tokens = d / "bpe.model", d / "tokens.txt"
    model, args = build_model(TINY_MODEL, tokens, bpe)
    model.load_state_dict(torch.load(d / "weights.pth"))
    with np.load(d / AUDIO) as saved:
        audio = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    transcripts = greedy(model, *batch(audio), TokenEncoder(bpe, tokens))
    model.eval()
    return Trained(model, args, audio, transcripts, bpe, tokens, d / "last.ckpt", d / "weights.pth")


def tiny_once(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """:func:`train_tiny` once per test session, for every module that needs the tiny model;
    each gets its own copy of the files (:func:`tests.e2e.built_once`), so a test that damages
    one (a checkpoint, the token list) cannot reach another module."""
    return load_tiny(built_once(tmp_path_factory, "tiny-model", train_tiny))

"""Decoding an exported package in a fresh process: bf16 weights, no autocast.

The evaluate rule judges the *exported artifact*, so it loads nothing but the package directory
(:mod:`asrflow.export.package`): config.yaml, model.pth, bpe.model and tokens.txt, checked
against package.json first.

**What runs in which dtype** (``dtype="bfloat16"``, the default):

========================  ==========  ===================================================
part                      dtype       why
========================  ==========  ===================================================
frontend (STFT, mel)      float32     bf16 STFT/mel is unsupported or inaccurate, and a bf16
                                      mel matrix makes float32 features fail to multiply
normalize (MVN)           float32     statistics of float32 features
preencoder, encoder,      bfloat16    the weights themselves are cast (``module.to``); the
postencoder, CTC,                     features are cast to bf16 at the encoder's input by a
decoder                               forward pre-hook
========================  ==========  ===================================================

**Batch-invariant.** A batch's transcripts are those of its utterances decoded one at a time,
so ``batch_seconds`` (and which other utterances an eval set holds) cannot change a figure: the
frontend runs on each utterance alone (:class:`UtteranceFrontend`); normalization, encoder and
CTC take the padded batch with its lengths, and mask the padding. (ESPnet's frontend on a padded
batch takes the STFT windows of an utterance's last frames over its zero padding, where alone
they span the reflection of its own samples: on the demo the last two log-mel frames differed by
up to 4.2, the attention spread that over the utterance, and 2 to 7 of the 136 dev transcripts
of each artifact changed between one at a time and ``batch_seconds`` 20 to 200, in bf16; 0 to 2
in float32; now none in float32.) What stays is rounding: the encoder's matrix products
differ in their last bits with the batch's shape, which in bf16 can tip a near tie: on the same
demo artifacts 1 of the 137 test transcripts of one of them changed at ``batch_seconds`` 60 and
200, none of the others' (dev or test) at 20, 60 or 200. As for the device, a result holds to
that rounding, so ``batch_seconds`` stays operational.

No ``torch.autocast`` anywhere: autocast keeps float32 master weights and picks per-op dtypes,
which is not what a bf16 deployment runs. :attr:`PackageModel.dtypes` records the table above
for every evaluation summary.

Decoding modes: ``greedy_ctc`` (the default; frame-wise argmax, repeats collapsed, blanks
dropped: the very function training's validation uses, :func:`asrflow.tokens.greedy_ctc`),
``beam`` (ESPnet's own ``Speech2Text`` beam search, attention + CTC, with the same dtype
casts applied to its model) and ``lexicon_lm`` (CTC beam search over the words of the train
transcripts with their word bigram LM, :mod:`asrflow.evaluate.word_lm`; the CTC posteriors
come from the cast model, the search runs in float32 on the CPU).

**Long recordings** (longer than ``window_seconds``, 30 s by default) are decoded in overlapping
windows whose CTC frames are stitched at the overlaps' middles (:mod:`asrflow.evaluate.longform`),
in modes greedy_ctc and lexicon_lm; mode beam decodes whole utterances, and the evaluate rule
refuses an eval set with a longer one in that mode.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from asrflow.errors import AsrflowError
from asrflow.evaluate.longform import stitch, window_groups, window_plan
from asrflow.evaluate.versions import DECODER_VERSION
from asrflow.export.espnet_model import build_espnet_model
from asrflow.export.find import model_sample_rate
from asrflow.export.package import (
    BPE_MODEL,
    CONFIG,
    MODEL,
    TOKENS,
    load_speech2text,
    verify_package,
)
from asrflow.io import dumps_json
from asrflow.settings import schema_defaults
from asrflow.tokens import TokenEncoder, greedy_ctc
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CAST_PARTS = ("preencoder", "encoder", "postencoder", "ctc", "decoder")
"""Submodules of an ``ESPnetASRModel`` whose weights take the evaluation dtype."""
FLOAT32_PARTS = ("frontend", "normalize")
"""Submodules kept in float32 (see the module docstring)."""
MODES = ("greedy_ctc", "beam", "lexicon_lm", "auto")
"""``auto`` is resolved per run before anything decodes
(:func:`asrflow.evaluate.word_lm.resolve_auto`); a :class:`PackageModel` refuses it."""


_DEFAULT = {**schema_defaults("evaluation"), **schema_defaults("evaluation.decoding")}


@dataclass(frozen=True)
class Decoding:
    """How an artifact is decoded (``evaluation`` in config.yaml; defaults the schema's, except
    ``mode``: a resolved mode, never ``auto``; numbers cast as :func:`decoding_from_config` casts
    them, so the fingerprint of the defaults is the config's)."""

    mode: str = "greedy_ctc"
    dtype: str = _DEFAULT["dtype"]
    device: str = _DEFAULT["device"]
    """``auto`` = the first CUDA device when there is one, else the CPU."""
    batch_seconds: float = float(_DEFAULT["batch_seconds"])
    """Audio per forward pass (utterances sorted by duration); 0 = one utterance at a time."""
    beam_size: int = _DEFAULT["beam_size"]
    ctc_weight: float | None = _DEFAULT["ctc_weight"]
    """Beam mode only; None = 1.0 for CTC-only models, ESPnet's 0.5 otherwise."""
    lm_weight: float = float(_DEFAULT["lm_weight"])
    """lexicon_lm only (:mod:`asrflow.evaluate.word_lm`), as the next two."""
    word_score: float = float(_DEFAULT["word_score"])
    beam_size_token: int = _DEFAULT["beam_size_token"]
    window_seconds: float = float(_DEFAULT["window_seconds"])
    """Utterances longer than this are decoded in overlapping windows
    (:mod:`asrflow.evaluate.longform`; modes greedy_ctc and lexicon_lm); 0 = never."""
    window_overlap_seconds: float = float(_DEFAULT["window_overlap_seconds"])

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise AsrflowError(f"evaluation.decoding.mode: {self.mode!r} is not one of {MODES}")
        if self.dtype not in DTYPES:
            raise AsrflowError(f"evaluation.dtype: {self.dtype!r} is not one of {list(DTYPES)}")
        if self.batch_seconds < 0:
            raise AsrflowError("evaluation.batch_seconds must be >= 0")
        if self.window_seconds and not 0 <= self.window_overlap_seconds < self.window_seconds:
            raise AsrflowError(
                f"evaluation.window_overlap_seconds ({self.window_overlap_seconds}) must be at "
                f"least 0 and below evaluation.window_seconds ({self.window_seconds})"
            )

    def windowed(self, seconds: float) -> bool:
        """Whether an utterance of ``seconds`` is decoded in windows."""
        return 0 < self.window_seconds < seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sha256(self, word_lm_sha256: str | None = None) -> str:
        """Fingerprint of what decides the transcripts: the decoder's version, mode, its own
        settings, dtype and (mode lexicon_lm) the word LM; not the device or the batch size
        (batch-invariant: the module docstring). Results with different
        fingerprints are archived side by side (:func:`asrflow.evaluate.archive.archive_name`)."""
        own = {
            "greedy_ctc": (),
            "beam": ("beam_size", "ctc_weight"),
            "lexicon_lm": ("beam_size", "lm_weight", "word_score", "beam_size_token"),
        }[self.mode]
        payload = {
            "decoder_version": DECODER_VERSION,
            "mode": self.mode,
            "dtype": self.dtype,
            **{k: getattr(self, k) for k in own},
        }
        if self.mode != "beam":  # beam decodes whole utterances (evaluate refuses long ones)
            payload["window_seconds"] = self.window_seconds
            payload["window_overlap_seconds"] = self.window_overlap_seconds
        if self.mode == "lexicon_lm":
            payload["word_lm"] = word_lm_sha256
        return hashlib.sha256(dumps_json(payload).encode("utf-8")).hexdigest()


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise AsrflowError(f"evaluation.device is {device!r} but no CUDA device is visible")
    return torch.device(device)


def _cast_inputs(dtype: torch.dtype):
    def hook(module: torch.nn.Module, args: tuple) -> tuple:
        return tuple(
            a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args
        )

    return hook


def cast_for_inference(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, str]:
    """Cast the encoder side of an ESPnet ASR model to ``dtype`` (frontend stays float32).

    Returns ``{part: dtype name}`` of every part the model has.
    """
    dtypes: dict[str, str] = {}
    first = None
    for name in (*FLOAT32_PARTS, *CAST_PARTS):
        part = getattr(model, name, None)
        if part is None:
            continue
        if name in CAST_PARTS:
            part.to(dtype)
            if first is None and name != "ctc" and name != "decoder":
                first = part
        params = list(part.parameters()) + list(part.buffers())
        floats = {str(p.dtype).removeprefix("torch.") for p in params if p.is_floating_point()}
        dtypes[name] = ",".join(sorted(floats)) or "float32"  # weightless parts compute in fp32
    if dtype != torch.float32:
        if first is None:
            raise AsrflowError("the model has no encoder to cast")
        first.register_forward_pre_hook(_cast_inputs(dtype))
    return dtypes


class UtteranceFrontend(torch.nn.Module):
    """An ESPnet frontend that computes each utterance's features alone, at its own length,
    and pads the features instead of the audio: the features of an utterance are the same in
    any batch (see the module docstring). Holds the wrapped frontend as ``inner`` (its
    parameters and dtype are the frontend's); ``output_size()`` is the frontend's."""

    def __init__(self, frontend: torch.nn.Module) -> None:
        super().__init__()
        self.inner = frontend

    def output_size(self) -> int:
        return self.inner.output_size()

    def forward(
        self, speech: torch.Tensor, speech_lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        feats, lengths = [], []
        for row, n in zip(speech, speech_lengths.tolist(), strict=True):
            f, f_len = self.inner(row[None, :n], speech_lengths.new_tensor([n]))
            feats.append(f[0, : int(f_len[0])])
            lengths.append(f_len)
        return torch.nn.utils.rnn.pad_sequence(feats, batch_first=True), torch.cat(lengths)


class PackageModel:
    """An exported package, loaded strictly, cast for inference, ready to transcribe."""

    def __init__(
        self,
        package_dir: Pathlike,
        decoding: Decoding = Decoding(),
        word_lm: Pathlike | None = None,
    ) -> None:
        if decoding.mode == "auto":
            raise AsrflowError(
                "decoding.mode auto is resolved from the run's word LM before decoding "
                "(asrflow.evaluate.word_lm.resolve_auto); pass a concrete mode"
            )
        self.package = Path(package_dir)
        self.decoding = decoding
        self.manifest = verify_package(self.package)
        self.device = resolve_device(decoding.device)
        dtype = DTYPES[decoding.dtype]
        with open(self.package / CONFIG, encoding="utf-8") as f:
            self.config = yaml.safe_load(f)
        self.tokens = TokenEncoder(self.package / BPE_MODEL, self.package / TOKENS)
        self._s2t = None
        if decoding.mode == "beam":
            self._s2t = load_speech2text(
                self.package,
                device=str(self.device),
                beam_size=decoding.beam_size,
                ctc_weight=decoding.ctc_weight,
                verify=False,
            )
            self.model = self._s2t.asr_model
        else:
            self.model = build_espnet_model(self.config)
            state = torch.load(self.package / MODEL, map_location="cpu", weights_only=True)
            self.model.load_state_dict(state, strict=True)
            if self.model.frontend is not None:  # batched here; beam decodes one at a time
                self.model.frontend = UtteranceFrontend(self.model.frontend)
        self.model.to(self.device).eval()
        self.dtypes = cast_for_inference(self.model, dtype)
        log.info("loaded %s on %s; dtypes %s", self.package, self.device, self.dtypes)
        self.word_lm = None
        if decoding.mode == "lexicon_lm":
            if word_lm is None:
                raise AsrflowError(
                    "evaluation.decoding.mode lexicon_lm needs the run's word LM (rule word_lm)"
                )
            from asrflow.evaluate.word_lm import WordLMDecoder  # torchaudio's decoder: lexicon only

            self.word_lm = WordLMDecoder(
                word_lm,
                self.tokens,
                beam_size=decoding.beam_size,
                lm_weight=decoding.lm_weight,
                word_score=decoding.word_score,
                beam_size_token=decoding.beam_size_token,
            )

    @property
    def sample_rate(self) -> int:
        return model_sample_rate(self.config.get("frontend_conf"))

    @torch.inference_mode()
    def transcribe(self, audio: Sequence[np.ndarray]) -> list[str]:
        """Transcripts of float32 mono waveforms at :attr:`sample_rate`, in order, each decoded
        whole (:meth:`transcribe_long` decodes one in windows)."""
        self._check_no_autocast()
        if self._s2t is not None:
            return [self._beam(a) for a in audio]
        return [self._decode_frames(f) for f in self._frames(audio)]

    @torch.inference_mode()
    def transcribe_long(self, audio: np.ndarray, batch_seconds: float) -> str:
        """The transcript of one long waveform, decoded in windows of
        ``decoding.window_seconds`` stitched at their overlaps' middles
        (:mod:`asrflow.evaluate.longform`), at most ``batch_seconds`` of windows encoded at
        once (one window at least)."""
        self._check_no_autocast()
        if self._s2t is not None:
            raise AsrflowError(
                "decoding.mode beam decodes whole utterances; long-form decoding needs "
                "greedy_ctc or lexicon_lm"
            )
        sr = self.sample_rate
        window = round(self.decoding.window_seconds * sr)
        plan = window_plan(len(audio), window, round(self.decoding.window_overlap_seconds * sr))
        outputs: list[torch.Tensor] = []
        for group in window_groups(plan, max(window, round(batch_seconds * sr))):
            outputs += self._frames([audio[w.start : w.end] for w in group])
        return self._decode_frames(stitch(plan, outputs))

    def _check_no_autocast(self) -> None:
        if any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda", self.device.type)):
            raise AsrflowError("evaluation must not run under torch.autocast")

    def _frames(self, audio: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """Each waveform's CTC frames on the CPU, time first: argmax token IDs (greedy), or
        float32 log-probabilities (the lexicon search)."""
        speech = torch.zeros(len(audio), max(len(a) for a in audio), dtype=torch.float32)
        for i, a in enumerate(audio):
            speech[i, : len(a)] = torch.from_numpy(np.asarray(a, dtype=np.float32))
        lengths = torch.tensor([len(a) for a in audio], dtype=torch.int64)
        enc, enc_lens = self.model.encode(speech.to(self.device), lengths.to(self.device))
        if self.word_lm is not None:
            frames = self.model.ctc.log_softmax(enc).float().cpu()
        else:
            frames = self.model.ctc.argmax(enc).cpu()
        return [f[:n] for f, n in zip(frames, enc_lens.tolist(), strict=True)]

    def _decode_frames(self, frames: torch.Tensor) -> str:
        if self.word_lm is not None:
            return self.word_lm(frames)
        (ids,) = greedy_ctc(frames[None], [len(frames)], self.tokens.blank_id)
        return self.tokens.decode(ids)

    def _beam(self, audio: np.ndarray) -> str:
        results = self._s2t(torch.from_numpy(np.asarray(audio, dtype=np.float32)))
        return results[0][0] if results else ""


def batches(durations: Sequence[float], batch_seconds: float) -> Iterator[list[int]]:
    """Indices grouped into batches of at most ``batch_seconds`` of audio, by duration.

    Sorting by duration keeps padding small; an utterance longer than ``batch_seconds`` gets a
    batch of its own; ``batch_seconds`` 0 gives one utterance per batch.
    """
    order = sorted(range(len(durations)), key=lambda i: (durations[i], i))
    batch: list[int] = []
    total = 0.0
    for i in order:
        if batch and (batch_seconds <= 0 or total + durations[i] > batch_seconds):
            yield batch
            batch, total = [], 0.0
        batch.append(i)
        total += durations[i]
    if batch:
        yield batch


def timed_transcribe(
    model: PackageModel, audio: Sequence[np.ndarray], sample_rate: int, batch_seconds: float
) -> tuple[list[str], float]:
    """Transcripts in input order and the seconds spent in the model (audio loading excluded).
    Utterances longer than the decoding's ``window_seconds`` are decoded in windows, one
    utterance at a time (:meth:`PackageModel.transcribe_long`); the others in batches."""
    durations = [len(a) / sample_rate for a in audio]
    out: list[str] = [""] * len(audio)
    spent = 0.0

    def timed(decode: Callable[[], Any]) -> Any:
        nonlocal spent
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        start = time.perf_counter()
        result = decode()
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        spent += time.perf_counter() - start
        return result

    long = [i for i, d in enumerate(durations) if model.decoding.windowed(d)]
    whole = sorted(set(range(len(audio))) - set(long))
    for idx in batches([durations[i] for i in whole], batch_seconds):
        ids = [whole[j] for j in idx]
        hyps = timed(lambda ids=ids: model.transcribe([audio[i] for i in ids]))
        for i, h in zip(ids, hyps, strict=True):
            out[i] = h
    for i in long:
        out[i] = timed(lambda i=i: model.transcribe_long(audio[i], batch_seconds))
    return out, spent

"""Benchmark: long-form decoding on real speech, against decoding the pieces alone, and its memory.

Real recorded digits (``../shared/corpora/fsdd4``, four speakers) are joined into connected-digit
utterances ("pieces", 3-7 takes of one speaker, 2-5 s), and pieces into long recordings (40 s and
3 minutes by default). One package decodes, in one process and in the evaluation dtype (bf16
weights, no autocast, greedy CTC), each long recording in windows
(:meth:`asrflow.evaluate.decode.PackageModel.transcribe_long`, ``window_seconds`` and overlap as
given), whole in one forward pass (up to 5 minutes), and each of its pieces alone. Printed per
speaker and length: the WER of the windowed transcript against the pieces' transcripts joined
and against the whole decode's (the windows' own cost: 0 means they transcribe what one pass
over the recording does), and each one's WER against the reference.

The peak memory of one decode is measured in a fresh process per case (the resident set after
loading the model and the audio, and its peak during the decode: ``VmHWM``, reset first): a
10-minute recording in windows, and a 3-minute one in windows and whole (``window_seconds`` 0).

Without ``--package`` it first trains a small CTC conformer (8 kHz frontend, ~1 M parameters) on
connected digits of three speakers (``--train-speakers``, default george, jackson, lucas) for
``--steps`` optimizer steps on the CPU, and exports it (:func:`asrflow.export.package.
export_package`); nicolas is never heard in training, george is. Writes ``longform.json`` (with
machine, date and commit) to ``--out`` and prints it as a Markdown table::

    uv run python bench/longform.py --out results/bench/longform            # ~10 min, 2 cores
    uv run python bench/longform.py --package results/bench/longform/package --out ...

Figures are from one run on a shared machine; the WERs depend on the model trained, the agreement
and the memory on the windows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asrflow.corpus.connected import Recording, connected, join, read_takes, until
from asrflow.data.cuts import make_cut, save_cuts
from asrflow.evaluate.decode import Decoding, PackageModel
from asrflow.evaluate.scoring import pooled, score_utterance
from asrflow.text import TextNormalization

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FSDD = REPO.parent / "shared/corpora/fsdd4/all.jsonl"
RATE = 8000
WHOLE_UP_TO = 300.0
"""Longest recording also decoded whole (one forward pass): the windows' own effect, apart."""

MODEL = {
    "frontend": "default",
    "frontend_conf": {"fs": RATE, "n_fft": 256, "win_length": 200, "hop_length": 80, "n_mels": 40},
    "specaug": "specaug",
    "specaug_conf": {
        "apply_time_warp": False,
        "apply_freq_mask": True,
        "freq_mask_width_range": [0, 8],
        "num_freq_mask": 2,
        "apply_time_mask": True,
        "time_mask_width_range": [0, 10],
        "num_time_mask": 2,
    },
    "normalize": "utterance_mvn",
    "encoder": "conformer",
    "encoder_conf": {
        "output_size": 96,
        "attention_heads": 4,
        "linear_units": 384,
        "num_blocks": 4,
        "dropout_rate": 0.1,
        "input_layer": "conv2d",
        "cnn_module_kernel": 15,
        "rel_pos_type": "latest",
        "pos_enc_layer_type": "rel_pos",
        "selfattention_layer_type": "rel_selfattn",
        "use_cnn_module": True,
    },
    "model_conf": {"ctc_weight": 1.0, "report_cer": False, "report_wer": False},
}
"""The benchmark's model: small enough to train on 2 CPU cores in minutes."""


def train_package(out: Path, speakers: list[str], steps: int, seed: int) -> Path:
    """Train :data:`MODEL` on connected digits of ``speakers`` and export it to ``out``."""
    from asrflow.export.package import export_package
    from asrflow.tokenizer import TokenizerConfig, train_tokenizer
    from asrflow.tokens import TokenEncoder
    from asrflow.train.loop.model import build_model

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    takes = read_takes(FSDD)
    pool = [t for s in speakers for t in takes[s]]
    by_speaker = {s: takes[s] for s in speakers}
    out.mkdir(parents=True, exist_ok=True)
    texts = out / "texts.jsonl.gz"
    words = sorted({t.text for t in pool})
    save_cuts(
        [
            make_cut(
                utt_id=f"w{i}",
                audio="/none.wav",
                sampling_rate=RATE,
                num_samples=RATE,
                duration=1.0,
                text=" ".join(words[i:] + words[:i]),
            )
            for i in range(len(words))
        ],
        texts,
    )
    bpe, tokens = out / "bpe.model", out / "tokens.txt"
    train_tokenizer(texts, bpe, tokens, TokenizerConfig(model_type="char"), TextNormalization())
    enc = TokenEncoder(bpe, tokens)
    model, args = build_model(MODEL, tokens, bpe)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-3)
    warmup = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warmup)
            * 0.5
            * (1 + np.cos(np.pi * min(1.0, max(0, s - warmup) / max(1, steps - warmup))))
        ),
    )
    model.train()
    started = time.time()
    for step in range(1, steps + 1):
        speaker = list(by_speaker)[step % len(by_speaker)]
        batch = connected(by_speaker[speaker], rng, words=(1, 6), sample_rate=RATE, count=12)
        speech, lengths = _pad([b.audio for b in batch])
        ids = [enc.encode(b.text) for b in batch]
        text = torch.full((len(ids), max(map(len, ids))), -1, dtype=torch.long)
        for i, row in enumerate(ids):
            text[i, : len(row)] = torch.tensor(row)
        loss = model(speech, lengths, text, torch.tensor([len(r) for r in ids]))[0]
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps:
            print(
                f"step {step}/{steps} loss {loss.item():.3f} ({time.time() - started:.0f} s)",
                flush=True,
            )
    model.eval()
    weights = out / "weights.pth"
    torch.save(model.state_dict(), weights)
    export_package(
        state_dict_or_checkpoint=weights,
        espnet_args=args,
        bpe_model=bpe,
        tokens_txt=tokens,
        out_dir=out / "package",
        artifact="longform_bench",
    )
    return out / "package"


def _pad(audio: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    speech = torch.zeros(len(audio), max(len(a) for a in audio))
    for i, a in enumerate(audio):
        speech[i, : len(a)] = torch.from_numpy(a)
    return speech, torch.tensor([len(a) for a in audio])


def wer(refs: list[str], hyps: list[str]) -> float | None:
    contract = TextNormalization()
    scores = [
        score_utterance(str(i), r, h, contract)
        for i, (r, h) in enumerate(zip(refs, hyps, strict=True))
    ]
    return pooled(scores)["wer"]


def accuracy(
    package: Path,
    speakers: list[str],
    lengths: list[float],
    window: float,
    overlap: float,
    seed: int,
) -> list[dict[str, Any]]:
    """Long recordings decoded in windows against their pieces decoded alone."""
    takes = read_takes(FSDD)
    model = PackageModel(
        package, Decoding(device="cpu", window_seconds=window, window_overlap_seconds=overlap)
    )
    whole = PackageModel(package, Decoding(device="cpu", window_seconds=0))
    rows = []
    for speaker in speakers:
        rng = np.random.default_rng(seed)
        pieces = connected(takes[speaker], rng, words=(3, 7), sample_rate=RATE, count=120)
        for seconds in lengths:
            parts = until(pieces, seconds, RATE)
            long = join(parts, rng, sample_rate=RATE, pause=(0.2, 0.5))
            alone = model.transcribe([p.audio for p in parts])
            windowed = model.transcribe_long(long.audio, batch_seconds=60)
            in_one = whole.transcribe([long.audio])[0] if seconds <= WHOLE_UP_TO else None
            rows.append(
                {
                    "speaker": speaker,
                    "seconds": round(len(long.audio) / RATE, 1),
                    "pieces": len(parts),
                    "words": len(long.text.split()),
                    "windows": len(_plan(model, long)),
                    "wer_long_vs_pieces": wer([" ".join(alone)], [windowed]),
                    "wer_windowed_vs_whole": None if in_one is None else wer([in_one], [windowed]),
                    "wer_whole": None if in_one is None else wer([long.text], [in_one]),
                    "wer_long": wer([long.text], [windowed]),
                    "wer_pieces": wer([p.text for p in parts], alone),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _plan(model: PackageModel, rec: Recording) -> list[Any]:
    from asrflow.evaluate.longform import window_plan

    d = model.decoding
    return window_plan(
        len(rec.audio), round(d.window_seconds * RATE), round(d.window_overlap_seconds * RATE)
    )


def peak_memory(package: Path, seconds: float, window: float) -> dict[str, Any]:
    """Decode one recording of ``seconds`` in a fresh process; its peak RSS before and after."""
    proc = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(package), str(seconds), str(window)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _memory_child(package: str, seconds: str, window: str) -> None:
    takes = read_takes(FSDD)
    rng = np.random.default_rng(0)
    pieces = connected(takes["nicolas"], rng, words=(3, 7), sample_rate=RATE, count=400)
    long = join(until(pieces, float(seconds), RATE), rng, sample_rate=RATE)
    model = PackageModel(package, Decoding(device="cpu", window_seconds=float(window)))
    model.transcribe([long.audio[: 2 * RATE]])  # one small decode first: lazy allocations
    before = _reset_peak()
    started = time.perf_counter()
    if model.decoding.windowed(len(long.audio) / RATE):
        model.transcribe_long(long.audio, batch_seconds=60)
    else:
        model.transcribe([long.audio])
    print(
        json.dumps(
            {
                "seconds": round(len(long.audio) / RATE, 1),
                "window_seconds": float(window),
                "rss_mb_before_decode": round(before),
                "peak_rss_mb": round(_status_mb("VmHWM")),
                "decode_seconds": round(time.perf_counter() - started, 1),
            }
        )
    )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f} %"


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> float:
    """The resident set now, in MB, after resetting its peak (Linux: ``/proc/self/clear_refs``
    5), so that the peak read after a decode is the decode's, not the imports'."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mb("VmRSS")


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"Measured {m['date']} on {m['cpu']} ({m['threads']} threads), commit {m['commit']}; "
        f"windows of {result['window_seconds']:g} s overlapping by "
        f"{result['window_overlap_seconds']:g} s; bf16 weights, greedy CTC.",
        "",
        "| speaker | recording | pieces | words | windows | windowed vs pieces | windowed vs "
        "whole | WER windowed | WER whole | WER pieces |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["accuracy"]:
        heard = "held out" if r["speaker"] not in result["train_speakers"] else "heard"
        lines.append(
            f"| {r['speaker']} ({heard}) | {r['seconds']:.0f} s | {r['pieces']} | {r['words']} | "
            f"{r['windows']} | {_pct(r['wer_long_vs_pieces'])} | "
            f"{_pct(r.get('wer_windowed_vs_whole'))} | {_pct(r['wer_long'])} | "
            f"{_pct(r.get('wer_whole'))} | {_pct(r['wer_pieces'])} |"
        )
    lines += [
        "",
        "| recording | decoded | RSS before decode | peak RSS | decode time |",
        "|---|---|---|---|---|",
    ]
    for r in result["memory"]:
        how = f"windows of {r['window_seconds']:g} s" if r["window_seconds"] else "whole"
        lines.append(
            f"| {r['seconds']:.0f} s | {how} | {r['rss_mb_before_decode']} MB | "
            f"{r['peak_rss_mb']} MB | {r['decode_seconds']} s |"
        )
    return "\n".join(lines)


def _machine() -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from figures import commit, machine

    return {
        "cpu": machine(),
        "threads": torch.get_num_threads(),
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
    }


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--memory-child":
        _memory_child(*sys.argv[2:5])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--package", type=Path, help="an exported package (default: train one)")
    p.add_argument("--out", type=Path, default=REPO / "results/bench/longform")
    p.add_argument("--steps", type=int, default=1500, help="training steps without --package")
    p.add_argument("--train-speakers", nargs="+", default=["george", "jackson", "lucas"])
    p.add_argument("--speakers", nargs="+", default=["nicolas", "george"])
    p.add_argument("--lengths", nargs="+", type=float, default=[40.0, 180.0])
    p.add_argument("--window", type=float, default=30.0)
    p.add_argument("--overlap", type=float, default=4.0)
    p.add_argument("--memory-seconds", type=float, default=600.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--table", type=Path, help="print the tables of a longform.json, run nothing")
    args = p.parse_args(argv)
    if args.table:
        print(markdown(json.loads(args.table.read_text(encoding="utf-8"))))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    package = args.package or train_package(args.out, args.train_speakers, args.steps, args.seed)
    result = {
        "machine": _machine(),
        "package": str(package),
        "train_speakers": args.train_speakers,
        "window_seconds": args.window,
        "window_overlap_seconds": args.overlap,
        "accuracy": accuracy(
            package, args.speakers, args.lengths, args.window, args.overlap, args.seed
        ),
        "memory": [
            peak_memory(package, args.memory_seconds, args.window),
            peak_memory(package, max(args.lengths), args.window),
            peak_memory(package, max(args.lengths), 0.0),
        ],
    }
    with tempfile.NamedTemporaryFile("w", dir=args.out, delete=False, suffix=".tmp") as f:
        json.dump(result, f, indent=2)
    os.replace(f.name, args.out / "longform.json")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

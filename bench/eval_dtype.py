"""Benchmark: an exported package evaluated in float32 and in bfloat16, in one process.

The evaluate rule casts the encoder and CTC to bf16 without autocast (frontend float32,
:mod:`asrflow.evaluate.decode`). This script measures what that costs in accuracy and speed on a
real eval set, so the bf16 figures in the report can be trusted::

    uv run python bench/eval_dtype.py results/runs/demo_ctc/export/valid.loss.best \\
        results/data/demo/filtered/dev.jsonl.gz [--threads 2] [--rounds 2]

Prints, per dtype: pooled WER and CER under the default scoring contract, the number of
utterances whose transcript differs from float32's, and the decode seconds (model time only,
best of ``--rounds``) with the bf16/fp32 speed ratio. Compare ratios measured in one run: these
machines are shared and noisy.

The same figures are written as ``results/bench/eval_dtype.json`` (``bench/figures.py``; no docs
table reads it yet), a row per dtype.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from asrflow.data.cuts import load_cuts, text
from asrflow.evaluate.decode import Decoding, PackageModel, timed_transcribe
from asrflow.evaluate.scoring import pooled, score_utterance
from asrflow.evaluate.stages import load_audio
from asrflow.text import TextNormalization

COLUMNS = (
    ("dtype", "dtype"),
    ("wer", "WER"),
    ("cer", "CER"),
    ("changed", "transcripts differing from float32's"),
    ("seconds", "decode s"),
    ("rtf", "RTF"),
    ("speed", "speed vs float32"),
    ("dtypes", "module dtypes"),
)


def figures_rows(results: dict[str, tuple], audio_seconds: float) -> list[dict[str, Any]]:
    """``main``'s results (dtype -> pooled totals, transcripts, decode seconds, the model's
    dtypes; float32 first) as the rows of ``results/bench/eval_dtype.json`` (:data:`COLUMNS`).

    >>> results = {"float32": ({"wer": 0.1, "cer": 0.05}, ["a b", "c"], 2.0, {"ctc": "float32"}),
    ...            "bfloat16": ({"wer": 0.11, "cer": 0.05}, ["a b", "d"], 1.0, {"ctc": "bfloat16"})}
    >>> row = figures_rows(results, 100.0)[1]
    >>> row["wer"], row["changed"], row["rtf"], row["speed"], row["dtypes"]
    ('11.00 %', 1, 0.01, '2.00x', 'ctc bfloat16')
    """
    fp32 = results["float32"]
    rows = []
    for dtype, (totals, hyps, seconds, dtypes) in results.items():
        rows.append(
            {
                "dtype": dtype,
                "wer": f"{100 * totals['wer']:.2f} %",
                "cer": f"{100 * totals['cer']:.2f} %",
                "changed": sum(a != b for a, b in zip(hyps, fp32[1], strict=True)),
                "seconds": round(seconds, 3),
                "rtf": round(seconds / audio_seconds, 4),
                "speed": f"{fp32[2] / seconds:.2f}x",
                "dtypes": ", ".join(f"{part} {dtype}" for part, dtype in dtypes.items()),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package")
    parser.add_argument("cuts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-seconds", type=float, default=60.0)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    from figures import figures_json, load, settings_of, write_figures  # bench/, beside this

    load_before = load()
    torch.set_num_threads(args.threads)
    cuts = list(load_cuts(args.cuts))
    contract = TextNormalization()
    results = {}
    for dtype in ("float32", "bfloat16"):
        model = PackageModel(
            args.package,
            Decoding(dtype=dtype, device=args.device, batch_seconds=args.batch_seconds),
        )
        sr = model.sample_rate
        audio = [load_audio(c, sr) for c in cuts]
        best = float("inf")
        for _ in range(args.rounds):
            hyps, seconds = timed_transcribe(model, audio, sr, args.batch_seconds)
            best = min(best, seconds)
        pairs = zip(cuts, hyps, strict=True)
        scores = [score_utterance(c.id, text(c), h, contract) for c, h in pairs]
        results[dtype] = (pooled(scores), hyps, best, model.dtypes)
    fp32 = results["float32"]
    audio_seconds = sum(c.duration for c in cuts)
    print(f"{len(cuts)} utterances, {audio_seconds:.1f} s of audio, {args.threads} threads")
    for dtype, (totals, hyps, seconds, dtypes) in results.items():
        changed = sum(a != b for a, b in zip(hyps, fp32[1], strict=True))
        print(
            f"{dtype:9s} WER {100 * totals['wer']:6.2f} %  CER {100 * totals['cer']:6.2f} %  "
            f"transcripts differing from fp32: {changed:3d}  decode {seconds:6.2f} s  "
            f"(RTF {seconds / audio_seconds:.4f}, x{fp32[2] / seconds:.2f} fp32 speed)  {dtypes}"
        )
    notes = [
        f"{args.package} on {args.cuts}: {len(cuts)} utterances, {audio_seconds:.1f} s of audio, "
        f"{args.threads} threads; decode s: model time, best of {args.rounds} round(s)."
    ]
    data = figures_json(
        COLUMNS, figures_rows(results, audio_seconds), load_before=load_before, notes=notes,
        settings=settings_of(args),
    )  # fmt: skip
    write_figures("eval_dtype", data)


if __name__ == "__main__":
    main()

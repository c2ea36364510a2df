"""A demo comparison report built from fixture data the way rule ``report`` builds it: scored
utterances, eval summaries with intervals and slices, selections made by the selection gate,
real plots, a failed run and a run with seed replicas (one of them failed), an archived result.

Runs (eval sets ``demo.dev``, ``demo.test``; 80 utterances of 8 words each):

- ``base``: the baseline; its average does not beat its best single checkpoint;
- ``bpe``: another tokenizer; its average is kept, significantly;
- ``cand``: seeds 0, 1, 2 (``cand-seed0`` ...), another learning rate; seed 2 diverged;
- ``broken``: failed (out of memory).

Example::

    html = build_demo(tmp_path)   # tmp_path / "results/report/comparison.html"
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

from asrflow.evaluate.archive import archive_eval_summary
from asrflow.evaluate.intervals import BOOTSTRAP, error_rate_intervals
from asrflow.evaluate.paired import read_utterance_errors
from asrflow.evaluate.scoring import by_slice, pooled, score_utterance, write_utterances_csv
from asrflow.report.plots import plot_learning_curves, plot_slice_wer
from asrflow.report.stages import build_report
from asrflow.select.choose import select_model
from asrflow.text import TextNormalization
from tests.report.test_comparison import eval_summary, sha, train_summary
from tests.report.test_plots import write_metrics

DEV, TEST = "demo.dev", "demo.test"
AVERAGE = "valid.loss.ave_3best"
ARTIFACTS = ("last", "valid.loss.best", AVERAGE)
REPLICAS = {f"cand-seed{s}": {"replica_of": "cand", "seed": s} for s in range(3)}

ERROR_RATES = {
    "base": {"last": 0.24, "valid.loss.best": 0.21, AVERAGE: 0.215},
    "bpe": {"last": 0.20, "valid.loss.best": 0.19, AVERAGE: 0.14},
    "cand-seed0": {"last": 0.18, "valid.loss.best": 0.17, AVERAGE: 0.175},
    "cand-seed1": {"last": 0.19, "valid.loss.best": 0.185, AVERAGE: 0.16},
}
"""Probability that a word of a clean utterance is wrong (noisy ones: 1.6 times as likely)."""

FAILED = {
    "broken": "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.77 GiB total)\nTraceback",
    "cand-seed2": "loss is NaN at step 812 (diverged); lower optim.lr",
}

SETTINGS = {"optim": {"lr": 0.002}, "trainer": {"max_steps": 2400}, "seed": 0}


def _utterances(eval_set: str, n: int = 80) -> list[tuple[str, str, dict[str, str]]]:
    rng = np.random.default_rng(len(eval_set))
    out = []
    for i in range(n):
        words = " ".join(f"w{rng.integers(0, 500)}" for _ in range(8))
        fields = {"speaker": f"s{i % 4}", "condition": "noisy" if i % 3 == 0 else "clean"}
        out.append((f"{eval_set}-u{i:03d}", words, fields))
    return out


def _hypothesis(ref: str, noisy: bool, p: float, common: np.ndarray, own: np.ndarray) -> str:
    """``ref`` with each word wrong where the shared and the model's own draws say so."""
    draw = 0.75 * common + 0.25 * own
    limit = p * (1.6 if noisy else 1.0)
    return " ".join("x" if d < limit else w for w, d in zip(ref.split(), draw, strict=True))


def _evaluate(root: Path, run: str, artifact: str, eval_set: str) -> Path:
    """Score the run's artifact on ``eval_set``: write ``utterances.csv`` and ``summary.json``."""
    contract = TextNormalization()
    utts = _utterances(eval_set)
    common = np.random.default_rng(zlib.crc32(eval_set.encode())).random((len(utts), 8))
    own = np.random.default_rng(zlib.crc32(f"{run}/{artifact}/{eval_set}".encode())).random(
        common.shape
    )
    p = ERROR_RATES[run][artifact]
    scores = [
        score_utterance(uid, ref, _hypothesis(ref, f["condition"] == "noisy", p, c, o), contract, f)
        for (uid, ref, f), c, o in zip(utts, common, own, strict=True)
    ]
    directory = root / "eval" / run / artifact / eval_set
    directory.mkdir(parents=True)
    write_utterances_csv(scores, directory / "utterances.csv")
    figures = pooled(scores)
    column = {k: np.array([getattr(s, k) for s in scores]) for k in ("ref_words", "ref_chars")}
    intervals = error_rate_intervals(
        [s.word_errors for s in scores],
        column["ref_words"],
        [s.char_errors for s in scores],
        column["ref_chars"],
        BOOTSTRAP,
    )
    slices = by_slice(scores, ["speaker", "condition"])
    for field, values in slices.items():
        for value, stats in values.items():
            mine = [s for s in scores if s.fields[field] == value]
            stats.update(
                error_rate_intervals(
                    [s.word_errors for s in mine],
                    [s.ref_words for s in mine],
                    [s.char_errors for s in mine],
                    [s.ref_chars for s in mine],
                    BOOTSTRAP,
                )
            )
    summary = eval_summary(run, artifact, figures["wer"], eval_set=eval_set)
    summary.update(figures, **intervals, slices=slices, rtf=0.04 + 0.01 * len(artifact) / 10)
    summary.update(utterances_total=len(utts), utterances_scored=len(utts), utterances_excluded=0)
    (directory / "summary.json").write_text(json.dumps(summary))
    return directory


def _train_summaries(root: Path) -> list[Path]:
    runs = {
        "base": train_summary("base", recipe_settings=SETTINGS),
        "bpe": train_summary(
            "bpe",
            recipe_settings=SETTINGS,
            hashes={**train_summary("x")["hashes"], "bpe_model": sha("z")},
        ),
        "broken": {
            "run": "broken",
            "status": "failed",
            "error": FAILED["broken"],
            "recipe_settings": {**SETTINGS, "trainer": {"max_steps": 2400, "batch_bins": 8e6}},
        },
    }
    for name, info in REPLICAS.items():
        settings = {**SETTINGS, "optim": {"lr": 0.0015}, "seed": info["seed"]}
        runs[name] = train_summary(name, recipe_settings=settings)
    runs["cand-seed2"] = {**runs["cand-seed2"], "status": "failed", "error": FAILED["cand-seed2"]}
    paths = []
    for run, summary in runs.items():
        path = root / "runs" / run / "train" / "summary.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(summary))
        paths.append(path)
    return paths


def build_demo(root: Path) -> Path:
    """Write the demo's inputs under ``root`` and build its report; the HTML page's path."""
    report = root / "results" / "report"
    plots = report / "plots"
    evaluations, selections, figures = [], [], []
    for run in ERROR_RATES:
        dirs = {(a, s): _evaluate(root, run, a, s) for a in ARTIFACTS for s in (DEV, TEST)}
        evaluations += [d / "summary.json" for d in dirs.values()]
        dev = [json.loads((dirs[(a, DEV)] / "summary.json").read_text()) for a in ARTIFACTS]
        errors = {a: read_utterance_errors(dirs[(a, DEV)] / "utterances.csv") for a in ARTIFACTS}
        selection = select_model(dev, run=run, dev_set=DEV, utterances=errors)
        path = root / "selected" / f"{run}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(selection))
        selections.append(path)
        curves = plots / run / "learning_curves.png"
        plot_learning_curves(write_metrics(root / f"{run}.metrics.csv"), curves, title=run)
        figures.append(curves)
        for eval_set in (DEV, TEST):
            summaries = [
                json.loads((dirs[(a, eval_set)] / "summary.json").read_text()) for a in ARTIFACTS
            ]
            out = plots / run / f"{eval_set}.slices.png"
            plot_slice_wer(summaries, out, eval_set=eval_set)
            figures.append(out)
    older = json.loads((root / "eval/base/last" / TEST / "summary.json").read_text())
    earlier = {"artifact_sha256": sha("9"), "wer": 0.31, "wer_ci_low": 0.27, "wer_ci_high": 0.35}
    archive_eval_summary({**older, **earlier}, root / "archive")
    build_report(
        train_summaries=_train_summaries(root),
        evaluations=evaluations,
        utterances=[Path(p).parent / "utterances.csv" for p in evaluations],
        selections=selections,
        archive_dir=root / "archive",
        csv_path=report / "comparison.csv",
        md_path=report / "comparison.md",
        html_path=report / "comparison.html",
        baseline_run="base",
        replicas=REPLICAS,
        replicas_path=report / "replicas.csv",
        plots=figures,
    )
    return report / "comparison.html"

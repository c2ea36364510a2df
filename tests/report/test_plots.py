from __future__ import annotations

from pathlib import Path

import pytest

from asrflow.errors import AsrflowError
from asrflow.report.comparison import slice_table
from asrflow.report.plots import plot_learning_curves, plot_slice_wer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_MAGIC


def write_metrics(path: Path, with_valid: bool = True) -> Path:
    """A CSVLogger-shaped metrics.csv: lr rows, train rows and (optionally) valid rows."""
    header = ["epoch", "lr", "step", "train/grad_norm", "train/loss_per_token"]
    if with_valid:
        header += ["valid/cer", "valid/loss", "valid/wer"]
    lines = [",".join(header)]
    for step in range(20):
        lr = f",{0.001 * min(1, (step + 1) / 5)},{step},,"
        train = f"0,,{step},{5.0 / (step + 1)},{3.0 - 0.1 * step}"
        lines += [lr + (",,," if with_valid else ""), train + (",,," if with_valid else "")]
        if with_valid and step % 5 == 4:
            lines.append(f"0,,{step},,,{0.5 - 0.02 * step},{2.5 - 0.1 * step},{0.8 - 0.03 * step}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_learning_curves_from_synthetic_metrics(tmp_path):
    out = tmp_path / "plots" / "curves.png"
    plot_learning_curves(write_metrics(tmp_path / "metrics.csv"), out)
    assert is_png(out)
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]  # no temporaries left


def test_learning_curves_without_validation_columns(tmp_path):
    out = tmp_path / "curves.png"
    plot_learning_curves(write_metrics(tmp_path / "metrics.csv", with_valid=False), out)
    assert is_png(out)


def test_learning_curves_rejects_other_csv(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(AsrflowError, match="step"):
        plot_learning_curves(tmp_path / "x.csv", tmp_path / "out.png")
    assert not (tmp_path / "out.png").exists()


def summary(artifact: str, eval_set: str = "demo.dev", contract: str = "c" * 64) -> dict:
    return {
        "run": "r",
        "artifact": artifact,
        "eval_set": eval_set,
        "contract_sha256": contract,
        "slices": {
            "speaker": {"s1": {"wer": 0.2}, "s2": {"wer": 0.3}, "(none)": {"wer": None}},
            "condition": {"clean": {"wer": 0.1}, "noisy": {"wer": 0.4}},
        },
    }


def test_slice_wer_from_summaries_and_table(tmp_path):
    summaries = [summary("last"), summary("best"), summary("last", eval_set="demo.test")]
    out = tmp_path / "slices.png"
    plot_slice_wer(summaries, out, eval_set="demo.dev")
    assert is_png(out)
    out2 = tmp_path / "slices_table.png"
    plot_slice_wer(slice_table(summaries, eval_set="demo.dev"), out2)
    assert is_png(out2)
    with pytest.raises(AsrflowError, match="several eval sets"):
        plot_slice_wer(summaries, tmp_path / "mixed.png")
    with pytest.raises(AsrflowError, match="more than once"):
        plot_slice_wer([summary("last"), summary("last")], tmp_path / "twice.png")


def test_slice_wer_without_slices(tmp_path):
    out = tmp_path / "empty.png"
    plot_slice_wer([{"run": "r", "artifact": "a", "eval_set": "x", "slices": {}}], out)
    assert is_png(out)

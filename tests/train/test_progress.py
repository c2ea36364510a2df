"""LineProgress: one readable line every so often instead of a redrawn bar in a log file."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

from asrflow.train.loop.progress import LineProgress, duration, progress_settings, watched


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def trainer(step: int, max_steps: int = 100, **metrics) -> SimpleNamespace:
    optimizer = SimpleNamespace(param_groups=[{"lr": 4.1e-4}])
    return SimpleNamespace(
        global_step=step,
        max_steps=max_steps,
        is_global_zero=True,
        sanity_checking=False,
        callback_metrics=metrics,
        optimizers=[optimizer],
    )


def test_one_line_per_interval_and_at_the_last_step(caplog) -> None:
    clock = Clock()
    progress = LineProgress(every_seconds=60, clock=clock)
    progress.on_train_start(trainer(0), None)
    with caplog.at_level(logging.INFO, logger="asrflow.train.loop.progress"):
        for step in range(1, 101):
            clock.now += 2.0  # 0.5 steps/s: a line every 30 steps
            progress.on_train_batch_end(trainer(step, **{"train/loss": 0.8123}), None)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split()[1] for line in lines] == ["30/100", "60/100", "90/100", "100/100"]
    assert lines[0] == "step 30/100 (30%) loss 0.8123 lr 4.10e-04 0.50 steps/s ETA 2m20s"
    assert lines[-1].endswith("ETA 0m00s")


def test_resumed_run_measures_speed_from_where_it_resumed(caplog) -> None:
    clock = Clock()
    progress = LineProgress(every_seconds=0, clock=clock)
    progress.on_train_start(trainer(500), None)
    clock.now += 10.0
    with caplog.at_level(logging.INFO, logger="asrflow.train.loop.progress"):
        progress.on_train_batch_end(trainer(510, max_steps=1000), None)
    assert "1.00 steps/s ETA 8m10s" in caplog.text


def test_validation_line_lists_the_validation_metrics(caplog) -> None:
    progress = LineProgress()
    metrics = {"valid/loss": 1.25, "valid/wer": 0.31, "train/loss": 2.0}
    with caplog.at_level(logging.INFO, logger="asrflow.train.loop.progress"):
        progress.on_validation_end(trainer(200, **metrics), None)
    assert caplog.messages == ["validation at step 200: valid/loss 1.2500 valid/wer 0.3100"]


def test_only_rank_zero_prints(caplog) -> None:
    progress = LineProgress(every_seconds=0)
    other = trainer(5)
    other.is_global_zero = False
    with caplog.at_level(logging.INFO, logger="asrflow.train.loop.progress"):
        progress.on_train_start(other, None)
        progress.on_train_batch_end(other, None)
        progress.on_validation_end(other, None)
    assert caplog.messages == []


def test_the_bar_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress_settings(Tty()) == (True, [])
    bar, callbacks = progress_settings(io.StringIO())
    assert bar is False and [type(c) for c in callbacks] == [LineProgress]
    assert not watched(SimpleNamespace())  # no isatty at all: not a terminal


def test_duration() -> None:
    assert duration(3725) == "1h02m05s" and duration(59.6) == "1m00s"
    assert duration(float("inf")) == "?" and duration(-1) == "?"


def test_a_real_run_in_a_log_file_prints_lines_not_bar_frames(tmp_path, caplog, capfd) -> None:
    """Issue 13, item 6: a redirected log held megabytes of tqdm carriage-return frames."""
    from asrflow.train.run.runner import train_run
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    with caplog.at_level(logging.INFO, logger="asrflow.train.loop.progress"):
        train_run(spec, tmp_path / "work", tmp_path / "out", tmp_path / "summary.json")
    lines = [r.getMessage() for r in caplog.records if r.name == "asrflow.train.loop.progress"]
    assert any(line.startswith("step 4/4 (100%) loss ") for line in lines), lines
    assert any(line.startswith("validation at step 2: valid/") for line in lines), lines
    out, err = capfd.readouterr()
    assert "\r" not in out + err  # no progress bar frames


def test_a_caller_may_still_choose_the_bar(tmp_path) -> None:
    """The benches pass ``enable_progress_bar=False`` through ``train_run``'s trainer overrides
    (it once collided with the runner's own choice: bench/spike_detector.py crashed)."""
    from asrflow.train.run.runner import train_run
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    out = tmp_path / "summary.json"
    summary = train_run(spec, tmp_path / "work", tmp_path / "out", out, enable_progress_bar=False)
    assert summary["status"] == "completed"


def test_the_line_shows_the_modules_last_step_loss(caplog) -> None:
    """AsrModule keeps its step's loss (``step_loss``) instead of self.log'ging it every step
    (~1 ms a step in Lightning's result collection) when no live bar reads it."""
    import torch

    progress = LineProgress(every_seconds=0)
    module = SimpleNamespace(step_loss=torch.tensor(0.25))
    progress.on_train_start(trainer(0), module)
    with caplog.at_level(logging.INFO, logger="asrflow.train.loop.progress"):
        progress.on_train_batch_end(trainer(1, **{"train/loss": 9.0}), module)
        progress.on_train_batch_end(trainer(2, **{"train/loss": 9.0}), SimpleNamespace())
    assert "step 1/100 (1%) loss 0.2500 " in caplog.messages[0]
    assert "step 2/100 (2%) loss 9.0000 " in caplog.messages[1]  # another module: as logged

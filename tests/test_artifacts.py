"""asrflow.artifacts: every checkpoint and artifact name spelt once."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from asrflow.artifacts import (
    artifact_names,
    average_name,
    best_name,
    checkpoint_pattern,
    checkpoint_tag,
    is_average,
    step_of,
)


@dataclass
class Crit:
    monitor: str
    top_k: int


def test_average_name_follows_espnet3():
    assert average_name("valid/loss", 3) == "valid.loss.ave_3best"
    assert average_name("valid/wer", 1) == "valid.wer.ave_1best"
    assert average_name("valid.acc", 10) == "valid.acc.ave_10best"
    with pytest.raises(ValueError):
        average_name("valid/loss", 0)
    with pytest.raises(ValueError):
        average_name("", 3)


def test_names_match_the_checkpoint_file_names():
    monitor = "valid/loss"
    checkpoint = checkpoint_pattern(monitor).format(step=1250) + ".ckpt"
    assert checkpoint == "valid.loss.step0001250.ckpt"
    assert step_of(checkpoint) == 1250 and step_of("last.ckpt") is None
    for name in (average_name(monitor, 3), best_name(monitor)):
        assert name.startswith(checkpoint_tag(monitor) + ".")


def test_is_average_only_for_average_names():
    assert is_average("valid.loss.ave_3best")
    assert not is_average("valid.loss.best") and not is_average("last")
    assert not is_average("my.ave_model.best")  # ".ave_" inside a name is not an average


def test_artifact_names_in_export_order():
    criteria = [Crit("valid/loss", 3), Crit("valid/wer", 1)]
    assert artifact_names(criteria) == [
        "last",
        "valid.loss.best",
        "valid.loss.ave_3best",
        "valid.wer.best",
    ]
    assert artifact_names(criteria, baseline=True)[:2] == ["baseline", "last"]

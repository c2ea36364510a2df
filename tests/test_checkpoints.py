"""Tests for asrflow.checkpoints: the ESPnet model's state dict from a checkpoint file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from asrflow.checkpoints import (
    LIGHTNING_PREFIX,
    DamagedCheckpoint,
    checkpoint_damage,
    load_model_state,
    read_model_state,
    read_training_checkpoint,
)
from asrflow.errors import AsrflowError

STATE = {
    "encoder.w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "encoder.h": torch.ones(2, dtype=torch.bfloat16),
    "bn.num_batches_tracked": torch.tensor(5),
    "mask": torch.tensor([True, False]),
}


def assert_same(a, b):
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert torch.equal(a[key], b[key]), key


def lightning_checkpoint(state, step=1200):
    """What Lightning writes for AsrModule: the ESPnet model under ``model.``, plus loop state."""
    return {
        "epoch": 0,
        "global_step": step,
        "pytorch-lightning_version": "2.6.6",
        "state_dict": {f"{LIGHTNING_PREFIX}{k}": v for k, v in state.items()},
        "loops": {"fit_loop": {"state_dict": {}}},
        "callbacks": {"ModelCheckpoint{'monitor': 'valid/loss'}": {"best_model_score": 1.0}},
        "optimizer_states": [{"state": {0: {"exp_avg": torch.zeros(2)}}, "param_groups": []}],
        "lr_schedulers": [],
        "asrflow_data": {"epoch": 0, "batches_in_epoch": 3},
    }


def espnet_checkpoint(state):
    """What ESPnet2's trainer writes as ``checkpoint.pth`` to resume from."""
    return {
        "model": dict(state),
        "reporter": {"stats": {1: {"valid": {"loss": 31.5}}}, "epoch": 1},
        "optimizers": [{"state": {0: {"exp_avg": torch.zeros(2)}}, "param_groups": []}],
        "schedulers": [None],
        "scaler": None,
    }


def save(tmp_path, obj, name="x.pth"):
    path = tmp_path / name
    torch.save(obj, path)
    return path


# --- the three kinds of file -------------------------------------------------------------------


def test_lightning_prefix_is_stripped(tmp_path):
    path = save(tmp_path, lightning_checkpoint(STATE), "valid.loss.step0001200.ckpt")
    state, kind = read_model_state(path)
    assert kind == "lightning"
    assert_same(state, STATE)


def test_espnet_checkpoint_gives_its_model_entry(tmp_path):
    state, kind = read_model_state(save(tmp_path, espnet_checkpoint(STATE), "checkpoint.pth"))
    assert kind == "espnet_checkpoint"
    assert_same(state, STATE)


def test_plain_state_dict_is_returned_as_is(tmp_path):
    plain = {**STATE, "model.inner": torch.zeros(1)}  # a prefix in a plain dict is left alone
    state, kind = read_model_state(save(tmp_path, plain))
    assert kind == "state_dict"
    assert_same(state, plain)


def test_load_model_state_is_the_state_alone(tmp_path):
    assert_same(load_model_state(save(tmp_path, lightning_checkpoint(STATE))), STATE)


# --- Lightning keys ------------------------------------------------------------------------------


def test_lightning_keys_without_the_prefix_are_an_error_naming_the_first(tmp_path):
    ckpt = lightning_checkpoint({})
    ckpt["state_dict"] = dict(STATE)  # a LightningModule that is not asrflow's AsrModule
    path = save(tmp_path, ckpt, "a.ckpt")
    with pytest.raises(
        AsrflowError, match=r"a\.ckpt: key 'encoder\.w' .*does not start with 'model\.' \(4 of 4"
    ):
        read_model_state(path)


def test_mixed_lightning_keys_are_an_error_naming_the_unprefixed_one(tmp_path):
    ckpt = lightning_checkpoint(STATE)
    ckpt["state_dict"]["ema.w"] = torch.ones(2)
    path = save(tmp_path, ckpt, "a.ckpt")
    with pytest.raises(
        AsrflowError, match=r"a\.ckpt: key 'ema\.w' .*does not start with 'model\.' \(1 of 5"
    ):
        read_model_state(path)


# --- refused and unreadable files ----------------------------------------------------------------


def _leave_a_mark(path):
    Path(path).write_text("unpickled")
    return {}


class Payload:
    """Unpickling this would run code: the reason for ``weights_only=True``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (_leave_a_mark, (str(self.marker),))


@pytest.mark.parametrize("where", ["lightning", "plain"])
def test_weights_only_refuses_a_pickled_object_without_running_it(tmp_path, where):
    marker = tmp_path / "ran"
    if where == "lightning":
        obj = {"state_dict": {"model.w": torch.ones(1)}, "extra": Payload(marker)}
    else:
        obj = {"encoder.w": torch.zeros(2), "x": Payload(marker)}
    path = save(tmp_path, obj, "evil.pth")
    with pytest.raises(AsrflowError) as err:
        read_model_state(path)
    message = str(err.value)
    assert message.startswith(f"{path}: refused by torch.load(weights_only=True): ")
    assert f"{__name__}._leave_a_mark" in message  # names the refused global
    assert "\n" not in message
    assert not marker.exists()


@pytest.mark.parametrize(
    "damage",
    [
        lambda good: good[:100],  # truncated zip
        lambda good: b"",  # empty file
        lambda good: b"hello, not a checkpoint",  # not a checkpoint at all
        lambda good: b"\x80\x02}q\x00X\x01\x00",  # a broken legacy pickle
    ],
    ids=["truncated", "empty-file", "text", "broken-pickle"],
)
def test_a_damaged_file_is_a_clear_error(tmp_path, damage):
    good = save(tmp_path, {"w": torch.ones(100)}, "good.pth")
    bad = tmp_path / "bad.pth"
    bad.write_bytes(damage(good.read_bytes()))
    with pytest.raises(
        AsrflowError, match=r"bad\.pth: cannot be read as a PyTorch checkpoint"
    ) as e:
        read_model_state(bad)
    assert "\n" not in str(e.value)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(AsrflowError, match=r"nothing\.ckpt: no such checkpoint file"):
        read_model_state(tmp_path / "nothing.ckpt")
    with pytest.raises(
        AsrflowError, match=rf"{re.escape(str(tmp_path))}: is a directory, not a checkpoint file"
    ):
        read_model_state(tmp_path)


# --- content that is not a state dict ------------------------------------------------------------


def test_content_that_is_not_a_mapping_is_an_error(tmp_path):
    path = save(tmp_path, [torch.ones(1)], "list.pth")
    with pytest.raises(AsrflowError, match=r"list\.pth: holds a list, not a state dict"):
        read_model_state(path)


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        ({}, "state dict"),
        (lightning_checkpoint({}), "Lightning state_dict"),
        (espnet_checkpoint({}), "'model' entry of ESPnet's checkpoint"),
    ],
    ids=["plain", "lightning", "espnet"],
)
def test_an_empty_state_dict_is_an_error(tmp_path, obj, where):
    path = save(tmp_path, obj, "empty.pth")
    with pytest.raises(AsrflowError, match=rf"empty\.pth: the {where} is empty"):
        read_model_state(path)


@pytest.mark.parametrize(
    ("obj", "key", "where"),
    [
        ({"encoder.w": torch.zeros(2), "epoch": 3}, "epoch", "state dict"),
        (
            {"state_dict": {"model.w": torch.zeros(2), "model.step": 3}},
            "model.step",
            "Lightning state_dict",
        ),
        (
            espnet_checkpoint({"w": torch.zeros(2), "step": 3}),
            "step",
            "'model' entry of ESPnet's checkpoint",
        ),
    ],
    ids=["plain", "lightning", "espnet"],
)
def test_a_non_tensor_value_is_an_error_naming_it(tmp_path, obj, key, where):
    path = save(tmp_path, obj, "meta.pth")
    with pytest.raises(
        AsrflowError, match=rf"meta\.pth: entry '{key}' of the {where} is a int, not a tensor"
    ):
        read_model_state(path)


def test_a_non_string_key_is_an_error(tmp_path):
    path = save(tmp_path, {0: torch.zeros(2)}, "ints.pth")
    with pytest.raises(AsrflowError, match=r"ints\.pth: key 0 of the state dict is not a string"):
        read_model_state(path)


# --- whole or damaged -----------------------------------------------------------------------------


def _flip_a_tensor_byte(path):
    """Damage one byte inside the tensor data of a ``torch.save`` file (not its header)."""
    data = bytearray(path.read_bytes())
    at = data.find(torch.full((4,), 7.0).numpy().tobytes())
    assert at > 0
    data[at + 1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damaged_tensor_bytes_fail_the_crc_check(tmp_path):
    path = save(tmp_path, {"w": torch.full((1000,), 7.0)})
    _flip_a_tensor_byte(path)
    assert not torch.equal(torch.load(path, weights_only=True)["w"], torch.full((1000,), 7.0))
    assert "fails its CRC check" in checkpoint_damage(path)
    with pytest.raises(DamagedCheckpoint, match=r"x\.pth: cannot be read .*fails its CRC check"):
        read_model_state(path)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda good: b"", "the file is empty (0 bytes)"),
        (lambda good: good[: len(good) // 2], "it is not a whole zip archive"),
        (lambda good: good[:-1], "it is not a whole zip archive"),
    ],
    ids=["zero-bytes", "half", "last-byte-missing"],
)
def test_a_training_checkpoint_is_read_whole_or_refused(tmp_path, damage, reason):
    good = save(tmp_path, lightning_checkpoint(STATE, step=40), "good.ckpt")
    assert read_training_checkpoint(good)["global_step"] == 40
    assert checkpoint_damage(good, zip_required=True) is None
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(damage(good.read_bytes()))
    with pytest.raises(DamagedCheckpoint) as err:
        read_training_checkpoint(bad)
    assert str(err.value).startswith(f"{bad}: ") and reason in str(err.value)
    assert err.value.reason.startswith(reason)


def test_a_state_dict_is_no_training_checkpoint(tmp_path):
    path = save(tmp_path, dict(STATE), "model.ckpt")
    with pytest.raises(DamagedCheckpoint, match=r"model\.ckpt: it holds no 'state_dict'"):
        read_training_checkpoint(path)
    with pytest.raises(DamagedCheckpoint, match=r"nothing\.ckpt: no such checkpoint file"):
        read_training_checkpoint(tmp_path / "nothing.ckpt")

"""Tests for asrflow.train.init.adapters (LoRA for fine-tuning runs) and the merge in
asrflow.checkpoints that turns an adapted checkpoint into plain ESPnet weights."""

from __future__ import annotations

import copy

import pytest
import torch

from asrflow.checkpoints import merge_lora, read_model_state
from asrflow.errors import AsrflowError
from asrflow.train.init.adapters import add_adapters
from tests.configs import run_settings
from tests.train.tiny_espnet import TINY_CTC_MODEL, build_asr_model


def adapter(**kw) -> dict:
    """``init.adapter`` as the schema check leaves it."""
    return run_settings(init={"model": "m.pth", "adapter": kw})["init"]["adapter"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    torch.manual_seed(0)
    return build_asr_model(TINY_CTC_MODEL, tmp_path_factory.mktemp("model"))


def _adapted(plain, **kw):
    model = copy.deepcopy(plain)
    record = add_adapters(model, adapter(**kw))
    for name, param in model.named_parameters():
        if name.endswith("lora_B"):  # loralib starts B at zero; make the adapters do something
            with torch.no_grad():
                param.normal_(std=0.5)
    return model, record


def test_the_schema_fills_the_adapters_defaults() -> None:
    assert adapter() == {
        "type": "lora", "rank": 8, "alpha": 8, "dropout": 0.0, "targets": ["linear_q", "linear_v"],
    }  # fmt: skip
    assert adapter(rank=2, targets=["w_1"])["rank"] == 2


def test_only_the_adapters_train_and_the_record_counts_them(plain) -> None:
    model, record = _adapted(plain, rank=2, alpha=4)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith(("lora_A", "lora_B")) for n in trainable)
    # one encoder block: its self-attention's query and value projections
    assert record["adapted_modules"] == 2
    assert record["adapter_parameters"] == sum(
        p.numel() for n, p in model.named_parameters() if n in trainable
    )
    assert record["adapter"]["rank"] == 2
    q = model.get_submodule("encoder.encoders.0.self_attn.linear_q")
    assert float(q.lora_scaling) == 2.0 and q.merge_weights is False


def test_fresh_layers_train_beside_the_adapters(plain) -> None:
    model = copy.deepcopy(plain)
    add_adapters(model, adapter(), fresh={"ctc.ctc_lo.weight", "ctc.ctc_lo.bias"})
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {"ctc.ctc_lo.weight", "ctc.ctc_lo.bias"} <= trainable


def test_targets_that_name_nothing_or_no_linear_layer_are_refused(plain) -> None:
    with pytest.raises(AsrflowError, match=r"name no module.*linear_q, linear_v"):
        add_adapters(copy.deepcopy(plain), adapter(targets=["query"]))
    with pytest.raises(AsrflowError, match=r"linear layers only"):
        add_adapters(copy.deepcopy(plain), adapter(targets=["self_attn"]))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_merged_checkpoint_is_the_plain_model_the_adapters_compute(plain, tmp_path, mode):
    """The Lightning checkpoint of an adapted model, read as the export and the average read it,
    is a plain ESPnet state dict that computes what the adapted model computes, whichever mode
    the model was in when it was saved."""
    model, _ = _adapted(plain, rank=2, alpha=4)
    model.train(mode == "train")
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}}, ckpt)
    state, fmt = read_model_state(ckpt)
    assert fmt == "lightning"
    assert set(state) == set(plain.state_dict())
    merged = copy.deepcopy(plain)
    merged.load_state_dict(state, strict=True)
    model.eval()
    merged.eval()
    x = torch.randn(2, 5, 16)
    name = "encoder.encoders.0.self_attn.linear_q"
    assert torch.allclose(model.get_submodule(name)(x), merged.get_submodule(name)(x), atol=1e-5)
    assert not torch.allclose(model.get_submodule(name)(x), plain.get_submodule(name)(x))
    speech, lengths = torch.randn(2, 1600), torch.tensor([1600, 1200])
    with torch.no_grad():
        ours, _ = model.encode(speech, lengths)
        theirs, _ = merged.encode(speech, lengths)
    assert torch.allclose(ours, theirs, atol=1e-4)


def test_a_state_without_adapters_is_left_as_it_is_and_a_torn_one_is_refused(plain) -> None:
    state = plain.state_dict()
    assert merge_lora(state) == state
    torn = {"a.weight": torch.zeros(2, 2), "a.lora_A": torch.zeros(1, 2)}
    with pytest.raises(AsrflowError, match=r"LoRA layer 'a' lacks a\.lora_B, a\.lora_scaling"):
        merge_lora(torn, "x.ckpt")


def test_a_lora_run_trains_only_its_adapters_and_exports_plain_weights(tmp_path) -> None:
    """The train job's parts with init.adapter: the start weights load, the adapters are added,
    an update moves only them, and the run's checkpoint reads back as the plain model."""
    import dataclasses

    import lightning as L

    from asrflow.train.loop.parts import build_trainer_parts
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    start = tmp_path / "start.pth"
    plain = build_trainer_parts(spec, tmp_path / "w0")["module"].model
    torch.save(plain.state_dict(), start)
    init = run_settings(init={"model": str(start), "adapter": {"rank": 2}})["init"]
    spec = dataclasses.replace(spec, init=init)
    parts = build_trainer_parts(spec, tmp_path / "w1")
    module = parts["module"]
    assert parts["init"]["adapter"]["rank"] == 2 and parts["init"]["adapted_modules"] > 0
    assert parts["init"]["trainable_parameters"] == parts["init"]["adapter_parameters"]
    module.trainer = L.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu")
    optimizer = module.configure_optimizers()["optimizer"]
    named = dict(module.model.named_parameters())
    before = {n: p.detach().clone() for n, p in named.items()}
    loss, _, _ = module(next(iter(parts["train_loader"])))
    loss.backward()
    optimizer.step()
    moved = {n for n, p in named.items() if not torch.equal(p.detach(), before[n])}
    assert moved and all(n.endswith(("lora_A", "lora_B")) for n in moved), moved
    ckpt = tmp_path / "last.ckpt"
    torch.save(
        {"state_dict": {f"model.{k}": v for k, v in module.model.state_dict().items()}}, ckpt
    )
    state, _ = read_model_state(ckpt)
    assert set(state) == set(plain.state_dict())

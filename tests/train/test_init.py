"""Tests for asrflow.train.init.weights: starting a run from existing weights (fine-tuning)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest
import torch
import yaml

from asrflow.errors import AsrflowError
from asrflow.export.find import check_token_list, find_weights, tracked_weights
from asrflow.train.init.weights import MAX_LISTED, InitConfig, InitMismatch, apply_init, select_keys
from tests.configs import run_settings
from tests.train.tiny_espnet import TINY_CTC_MODEL, TOKENS, build_asr_model


def init(d: dict) -> dict:
    """``runs.<run>.init`` as the schema check leaves it, defaults filled in."""
    return run_settings(init=d)["init"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two tiny ESPnet models with different random weights, and a wider third one."""
    d = tmp_path_factory.mktemp("models")
    torch.manual_seed(1)
    source = build_asr_model(TINY_CTC_MODEL, d / "a")
    torch.manual_seed(2)
    target = build_asr_model(TINY_CTC_MODEL, d / "b")
    wide = {**TINY_CTC_MODEL, "encoder_conf": {**TINY_CTC_MODEL["encoder_conf"], "output_size": 8}}
    torch.manual_seed(3)
    other = build_asr_model(wide, d / "c")
    return source, target, other


@pytest.fixture()
def fresh(models):
    """A copy of the target model (tests change it in place)."""
    import copy

    return copy.deepcopy(models[1])


@pytest.fixture()
def source_pth(models, tmp_path) -> Path:
    path = tmp_path / "src" / "model.pth"
    path.parent.mkdir()
    torch.save(models[0].state_dict(), path)
    return path


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.detach().cpu(), b.detach().cpu())


def test_a_saved_state_dict_loads_into_another_model(models, fresh, source_pth):
    source = models[0].state_dict()
    assert not all(_equal(fresh.state_dict()[k], v) for k, v in source.items())
    record = apply_init(fresh, init({"model": str(source_pth)}))
    after = fresh.state_dict()
    assert all(_equal(after[k], v) for k, v in source.items())
    assert record["loaded_keys"] == len(source)
    assert record["skipped_keys"] == 0
    assert record["include"] == ["*"] and record["exclude"] == []


def test_the_record_has_the_sha256_of_the_weights_file(fresh, source_pth, caplog):
    with caplog.at_level(logging.INFO, logger="asrflow.train.init.weights"):
        record = apply_init(fresh, init({"model": str(source_pth.parent)}))
    assert record["weights_sha256"] == hashlib.sha256(source_pth.read_bytes()).hexdigest()
    assert record["model"] == str(source_pth.parent)
    assert record["weights"] == str(source_pth)
    assert "loaded" in caplog.text and record["weights_sha256"][:12] in caplog.text


def test_include_exclude_keep_the_encoder_and_reinitialise_ctc(models, fresh, source_pth):
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    record = apply_init(
        fresh,
        init(
            {"model": str(source_pth), "include": ["encoder.*", "frontend.*"], "exclude": ["ctc.*"]}
        ),
    )
    source, after = models[0].state_dict(), fresh.state_dict()
    encoder = [k for k in source if k.startswith("encoder.")]
    ctc = [k for k in source if k.startswith("ctc.")]
    assert encoder and ctc
    assert all(_equal(after[k], source[k]) for k in encoder)
    assert all(_equal(after[k], before[k]) for k in ctc)
    assert not any(_equal(after[k], source[k]) for k in ctc if source[k].numel() > 1)
    assert record["loaded_keys"] == len(select_keys(source, ["encoder.*", "frontend.*"], [])[0])
    assert record["skipped_keys"] == len(source) - record["loaded_keys"]
    assert record["fresh_keys"] >= len(ctc)


def test_shape_mismatch_names_the_key_and_both_shapes(models, fresh, tmp_path):
    path = tmp_path / "wide.pth"
    torch.save(models[2].state_dict(), path)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(InitMismatch) as err:
        apply_init(fresh, init({"model": str(path)}))
    msg = str(err.value)
    assert f"init: {path} (init.model {str(path)!r}) does not fit the run's model" in msg
    wide, narrow = models[2].state_dict(), fresh.state_dict()
    misshaped = [k for k in wide if tuple(wide[k].shape) != tuple(narrow[k].shape)]
    assert len(misshaped) > MAX_LISTED
    assert f"{len(misshaped)} shape mismatch(es), the file's shape vs the model's: " in msg
    first = misshaped[0]
    assert f"{first!r} {tuple(wide[first].shape)} vs {tuple(narrow[first].shape)}" in msg
    assert f"and {len(misshaped) - MAX_LISTED} more" in msg
    assert "Exclude the keys that differ in the run's init.exclude" in msg
    # nothing was loaded: the model is as it was, ready for a rerun with fixed patterns
    assert all(_equal(fresh.state_dict()[k], v) for k, v in before.items())


def test_a_key_the_model_lacks_is_an_error_unless_excluded(models, fresh, tmp_path):
    state = {**models[0].state_dict(), "decoder.embed.0.weight": torch.zeros(3, 3)}
    path = tmp_path / "extra.pth"
    torch.save(state, path)
    with pytest.raises(InitMismatch) as err:
        apply_init(fresh, init({"model": str(path)}))
    msg = str(err.value)
    assert "1 key(s) the model lacks: 'decoder.embed.0.weight' (3, 3)" in msg
    assert "they start with decoder.*" in msg and str(path) in msg
    record = apply_init(fresh, init({"model": str(path), "exclude": ["decoder.*"]}))
    assert record["skipped_keys"] == 1


def test_keys_the_file_lacks_are_an_error_unless_excluded(models, fresh, tmp_path):
    """A package without some of the model's keys would leave them at their random start."""
    source = models[0].state_dict()
    ctc = [k for k in source if k.startswith("ctc.")]
    path = tmp_path / "no_ctc.pth"
    torch.save({k: v for k, v in source.items() if k not in ctc}, path)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with pytest.raises(InitMismatch) as err:
        apply_init(fresh, init({"model": str(path)}))
    msg = str(err.value)
    assert f"{len(ctc)} model key(s) selected by include ['*'] and exclude [] that the file " in msg
    assert f"{ctc[0]!r} {tuple(source[ctc[0]].shape)}" in msg
    assert "they start with ctc.*" in msg
    assert all(_equal(fresh.state_dict()[k], v) for k, v in before.items())
    record = apply_init(fresh, init({"model": str(path), "exclude": ["ctc.*"]}))
    assert record["loaded_keys"] == len(source) - len(ctc)


def test_all_three_kinds_are_listed_together(models, fresh, tmp_path):
    source = models[0].state_dict()
    key = next(k for k in source if k.startswith("encoder.") and source[k].dim() == 2)
    state = {k: v for k, v in source.items() if not k.startswith("ctc.")}
    state[key] = torch.zeros(*source[key].shape[::-1], 1)
    state["extra.weight"] = torch.zeros(2)
    path = tmp_path / "mixed.pth"
    torch.save(state, path)
    with pytest.raises(InitMismatch) as err:
        apply_init(fresh, init({"model": str(path)}))
    msg = str(err.value)
    assert "1 key(s) the model lacks: 'extra.weight' (2,)" in msg
    assert f"1 shape mismatch(es), the file's shape vs the model's: {key!r}" in msg
    assert "that the file lacks: 'ctc." in msg


def test_a_load_that_changes_nothing_is_caught(fresh, source_pth, monkeypatch):
    """The guard against ESPnet-style silent no-ops: loaded tensors are compared with the file."""
    from torch.nn.modules.module import _IncompatibleKeys

    monkeypatch.setattr(fresh, "load_state_dict", lambda *a, **k: _IncompatibleKeys([], []))
    with pytest.raises(AsrflowError, match="did not arrive in the model"):
        apply_init(fresh, init({"model": str(source_pth)}))


def test_nothing_selected_is_an_error(fresh, source_pth):
    with pytest.raises(AsrflowError, match="no key"):
        apply_init(fresh, init({"model": str(source_pth), "include": ["encoders.*"]}))


def test_a_lightning_checkpoint_loses_the_model_prefix(models, fresh, tmp_path):
    source = models[0].state_dict()
    ckpt = {
        "state_dict": {f"model.{k}": v for k, v in source.items()},
        "global_step": 7,
        "asrflow_data": {"epoch": 0, "batches_in_epoch": 3},
    }
    path = tmp_path / "last.ckpt"
    torch.save(ckpt, path)
    apply_init(fresh, init({"model": str(path)}))
    assert all(_equal(fresh.state_dict()[k], v) for k, v in source.items())


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"w")
    return path


def test_find_weights_in_package_and_espnet_directories(tmp_path):
    # a plain file is itself
    f = _touch(tmp_path / "x" / "anything.pth")
    assert find_weights(f) == f
    # an exported package: config.yaml + model.pth
    pkg = tmp_path / "pkg"
    _touch(pkg / "config.yaml")
    model = _touch(pkg / "model.pth")
    assert find_weights(pkg) == model
    # an ESPnet experiment dir: valid.acc.ave.pth links to the 10-best average
    exp = tmp_path / "exp"
    best = _touch(exp / "valid.acc.ave_10best.pth")
    (exp / "valid.acc.ave.pth").symlink_to(best.name)
    _touch(exp / "checkpoint.pth")
    _touch(exp / "3epoch.pth")
    assert find_weights(exp) == exp / "valid.acc.ave.pth"
    # ESPnet's meta.yaml (espnet_model_zoo / pack) wins over file-name guesses
    zoo = tmp_path / "zoo"
    weights = _touch(zoo / "exp" / "asr_train" / "valid.acc.ave_10best.pth")
    _touch(zoo / "model.pth")
    (zoo / "meta.yaml").write_text(
        yaml.safe_dump(
            {
                "files": {"asr_model_file": "exp/asr_train/valid.acc.ave_10best.pth"},
                "yaml_files": {"asr_train_config": "exp/asr_train/config.yaml"},
            }
        )
    )
    assert find_weights(zoo) == weights
    # a lone .pth of any name
    assert find_weights(f.parent) == f


def test_find_weights_ambiguity_lists_the_candidates(tmp_path):
    _touch(tmp_path / "valid.acc.ave_10best.pth")
    _touch(tmp_path / "valid.loss.ave_5best.pth")
    with pytest.raises(
        AsrflowError, match=r"valid\.acc\.ave_10best\.pth, valid\.loss\.ave_5best\.pth"
    ):
        find_weights(tmp_path)


def test_find_weights_says_what_is_missing(tmp_path):
    with pytest.raises(AsrflowError, match="does not exist"):
        find_weights(tmp_path / "nope")
    _touch(tmp_path / "config.yaml")
    with pytest.raises(AsrflowError, match=r"no weights file found.*config\.yaml"):
        find_weights(tmp_path)
    (tmp_path / "meta.yaml").write_text("files: {asr_model_file: gone.pth}\n")
    with pytest.raises(AsrflowError, match=r"gone\.pth"):
        find_weights(tmp_path)


def test_tracked_weights_resolves_existing_and_passes_future_paths(tmp_path):
    w = _touch(tmp_path / "pkg" / "model.pth")
    assert tracked_weights(tmp_path / "pkg") == str(w)
    assert tracked_weights("results/runs/base/model.pth") == "results/runs/base/model.pth"


def _package(tmp_path: Path, models, token_list) -> Path:
    """An asrflow package as asrflow.export.package lays it out (package.json with digests)."""
    from asrflow.export.package import CONFIG, MANIFEST, MODEL, TOKENS

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    torch.save(models[0].state_dict(), pkg / MODEL)
    (pkg / CONFIG).write_text(yaml.safe_dump({"token_list": token_list}))
    (pkg / TOKENS).write_text("\n".join(token_list) + "\n")
    files = {n: hashlib.sha256((pkg / n).read_bytes()).hexdigest() for n in (CONFIG, MODEL, TOKENS)}
    (pkg / MANIFEST).write_text(json.dumps({"schema": "asrflow.package/1", "files": files}))
    return pkg


def test_an_asrflow_package_is_found_and_its_digest_checked(models, fresh, tmp_path):
    pkg = _package(tmp_path, models, list(TOKENS))
    assert find_weights(pkg) == pkg / "model.pth"
    record = apply_init(fresh, init({"model": str(pkg)}))
    assert (
        record["weights_sha256"]
        == json.loads((pkg / "package.json").read_text())["files"]["model.pth"]
    )
    torch.save(models[1].state_dict(), pkg / "model.pth")
    with pytest.raises(AsrflowError, match=r"SHA-256 differs.*package\.json"):
        apply_init(fresh, init({"model": str(pkg)}))


def test_reuse_tokenizer_checks_the_token_list(models, fresh, tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("\n".join(TOKENS) + "\n", encoding="utf-8")
    pkg = _package(tmp_path, models, list(TOKENS))
    record = apply_init(fresh, init({"model": str(pkg), "reuse_tokenizer": True}), tokens=tokens)
    assert record["reuse_tokenizer"] is True
    other = tmp_path / "other.txt"
    other.write_text("\n".join([*TOKENS[:5], "zz", *TOKENS[6:]]) + "\n", encoding="utf-8")
    with pytest.raises(AsrflowError, match=r"at entry 5: 'zz' vs 'd'"):
        check_token_list(pkg, other)
    with pytest.raises(AsrflowError, match="no run token list"):
        apply_init(fresh, init({"model": str(pkg), "reuse_tokenizer": True}))


def test_reuse_tokenizer_without_a_config_is_an_error(fresh, source_pth, tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("a\n", encoding="utf-8")
    with pytest.raises(AsrflowError, match=r"no config\.yaml"):
        apply_init(fresh, init({"model": str(source_pth), "reuse_tokenizer": True}), tokens=tokens)


def test_init_config_reads_the_schema_defaults_and_refuses_bad_keys():
    cfg = InitConfig.from_dict(init({"model": "m.pth"}))
    assert cfg == InitConfig(
        "m.pth",
        include=("*",),
        exclude=(),
        architecture="package",
        reuse_tokenizer=False,
        freeze=(),
        adapter=None,
    )
    with pytest.raises(AsrflowError, match="unknown key"):
        InitConfig.from_dict({**init({"model": "m.pth"}), "inclde": ["x"]})
    with pytest.raises(AsrflowError, match="'model' is required"):
        InitConfig.from_dict({"include": ["x"]})


def test_an_init_without_the_schema_defaults_is_refused_by_name():
    """The schema is the one source of the defaults: an unvalidated init is not guessed at."""
    with pytest.raises(
        AsrflowError, match=r"exclude, architecture, reuse_tokenizer, freeze missing.*with_defaults"
    ):
        InitConfig.from_dict({"model": "m.pth", "include": ["*"]})


def _espnet_exp_dir(model: torch.nn.Module, section: dict, directory: Path) -> Path:
    """An ESPnet experiment directory as ``asr.sh`` leaves it: config.yaml (every parsed ASRTask
    argument, training keys included) and valid.acc.ave.pth."""
    from espnet2.tasks.asr import ASRTask

    directory.mkdir(parents=True)
    (directory / "model.yaml").write_text(yaml.safe_dump(section))
    (directory / "tokens.txt").write_text("\n".join(TOKENS) + "\n")
    argv = [
        "--config",
        str(directory / "model.yaml"),
        "--token_list",
        str(directory / "tokens.txt"),
    ]
    args = ASRTask.get_parser().parse_args([*argv, "--output_dir", str(directory)])
    (directory / "config.yaml").write_text(yaml.safe_dump(vars(args)))
    torch.save(model.state_dict(), directory / "valid.acc.ave.pth")
    return directory


def test_an_espnet_exp_dir_gives_its_architecture_to_a_recipe_of_another_width(models, tmp_path):
    """Issue 32: a fine-tuning recipe need not repeat the starting model (here one of width 16,
    the recipe's 8); the model built from the run's spec loads the exp dir's weights."""
    from asrflow.train.spec import spec_from_inputs

    exp = _espnet_exp_dir(models[0], TINY_CTC_MODEL, tmp_path / "exp/asr_train")
    wide = {**TINY_CTC_MODEL, "encoder_conf": {**TINY_CTC_MODEL["encoder_conf"], "output_size": 8}}
    recipe = {"settings": {**wide, "trainer": {"max_steps": 4}}, "operational": {}, "name": "r"}
    recipe["explicit"] = ["trainer.max_steps"]
    inputs = {"train_0": "t", "dev": "d", "bpe_model": "b", "tokens": "k"}
    cfg = init({"model": str(exp)})
    spec = spec_from_inputs("r", inputs, normalization={}, recipe=recipe, init=cfg)
    model_keys = dict(spec.recipe.model)
    assert model_keys["encoder_conf"] == TINY_CTC_MODEL["encoder_conf"]
    assert spec.architecture["from"] == str(exp / "config.yaml")
    torch.manual_seed(4)
    model = build_asr_model(model_keys, tmp_path / "built")
    record = apply_init(model, cfg)
    assert record["fresh_keys"] == 0 and record["loaded_keys"] == len(models[0].state_dict())
    with pytest.raises(InitMismatch, match=r"encoder_conf\.output_size set by the run's overrides"):
        apply_init(
            build_asr_model(wide, tmp_path / "wide"), cfg, overridden=["encoder_conf.output_size"]
        )


def test_a_new_token_list_starts_the_output_layers_fresh(models, fresh, tmp_path, caplog):
    """Issue 32: a run whose token list is not its starting model's loads every layer but those
    with a row per token (they would map new tokens to old rows), says so, and records it."""
    pkg = _package(tmp_path, models, list(TOKENS))
    same = tmp_path / "same.txt"
    same.write_text("\n".join(TOKENS) + "\n", encoding="utf-8")
    record = apply_init(fresh, init({"model": str(pkg)}), tokens=same)
    assert record["vocabulary"] == {
        "run_tokens": len(TOKENS), "model_tokens": len(TOKENS), "same": True,
        "output_layers": "loaded",
    }  # fmt: skip
    assert record["exclude"] == []
    # the same number of tokens, one of them another: still a new vocabulary
    other = tmp_path / "other.txt"
    other.write_text("\n".join([*TOKENS[:5], "zz", *TOKENS[6:]]) + "\n", encoding="utf-8")
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    with caplog.at_level(logging.WARNING, logger="asrflow.train.init.weights"):
        record = apply_init(fresh, init({"model": str(pkg)}), tokens=other)
    assert record["vocabulary"]["same"] is False
    assert record["vocabulary"]["output_layers"] == "fresh"
    assert "ctc.ctc_lo.*" in record["exclude"]
    after, source = fresh.state_dict(), models[0].state_dict()
    for key in after:
        kept = key.startswith("ctc.ctc_lo.")
        assert _equal(after[key], before[key] if kept else source[key]), key
    assert "output layers" in caplog.text and "tokenizer: init" in caplog.text


def test_freeze_takes_module_prefixes_and_fnmatch_patterns(models, fresh, source_pth):
    record = apply_init(fresh, init({"model": str(source_pth), "freeze": ["encoder", "ctc.*"]}))
    named = dict(fresh.named_parameters())
    for name, param in named.items():
        assert param.requires_grad == (not name.startswith(("encoder.", "ctc."))), name
    total = sum(p.numel() for p in named.values())
    assert record["freeze"] == ["encoder", "ctc.*"]
    assert record["trainable_parameters"] == sum(
        p.numel() for p in named.values() if p.requires_grad
    )
    assert record["frozen_parameters"] + record["trainable_parameters"] == total
    assert record["frozen_parameters"] > 0 and record["frozen_tensors"] > 0


def test_a_module_without_parameters_may_be_named_and_freezes_nothing(fresh, source_pth):
    # the tiny model's log-mel frontend has no parameters: a recipe may still list it
    record = apply_init(fresh, init({"model": str(source_pth), "freeze": ["frontend"]}))
    assert record["frozen_tensors"] == 0
    assert all(p.requires_grad for p in fresh.parameters())


def test_a_freeze_pattern_that_matches_nothing_names_the_modules(fresh, source_pth):
    # "encoders" is a submodule's name, not a top-level module: a typo that would train all
    with pytest.raises(AsrflowError, match=r"'encoders' match\(es\) no parameter.*encoder, ctc"):
        apply_init(fresh, init({"model": str(source_pth), "freeze": ["encoders"]}))


def test_a_frozen_encoder_keeps_its_weights_through_a_training_step(tmp_path):
    """The train job's parts: init loads, freeze stops the encoder, the optimizer leaves it out,
    and one update moves only what is trainable."""
    import dataclasses

    import lightning as L

    from asrflow.train.loop.parts import build_trainer_parts
    from tests.train.tiny_run import make_tiny_run

    spec = make_tiny_run(tmp_path / "data")
    start = tmp_path / "start.pth"
    torch.save(build_trainer_parts(spec, tmp_path / "w0")["module"]
               .model.state_dict(), start)  # fmt: skip
    spec = dataclasses.replace(spec, init=init({"model": str(start), "freeze": ["encoder"]}))
    parts = build_trainer_parts(spec, tmp_path / "w1")
    module = parts["module"]
    assert parts["init"]["trainable_parameters"] < sum(p.numel() for p in module.parameters())
    module.trainer = L.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu")
    optimizer = module.configure_optimizers()["optimizer"]
    in_optimizer = {id(p) for g in optimizer.param_groups for p in g["params"]}
    named = dict(module.model.named_parameters())
    assert {n for n, p in named.items() if id(p) in in_optimizer} == {
        n for n in named if not n.startswith("encoder.")
    }
    before = {n: p.detach().clone() for n, p in named.items()}
    loss, _, _ = module(next(iter(parts["train_loader"])))
    loss.backward()
    optimizer.step()
    for name, param in named.items():
        moved = not torch.equal(param.detach(), before[name])
        assert moved != name.startswith("encoder."), name

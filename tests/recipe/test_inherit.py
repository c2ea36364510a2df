"""Tests for asrflow.recipe.inherit: a fine-tuning run's model keys from its starting package."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from asrflow.errors import AsrflowError
from asrflow.recipe.inherit import (
    ARCHITECTURE_KEYS,
    inherit_architecture,
    read_architecture,
    takes_package_architecture,
)
from asrflow.recipe.plan import apply_plan, make_plan
from asrflow.train.spec import spec_from_inputs
from tests.recipe.test_rules import corpus

PACKAGE_CONFIG = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 16, "num_blocks": 1, "dropout_rate": 0.1},
    "frontend": "default",
    "frontend_conf": {"fs": 8000, "n_mels": 40},
    "normalize": "utterance_mvn",
    "normalize_conf": {},
    "decoder": None,
    "ctc_conf": {"dropout_rate": 0.0},
    "model": "espnet",
    "model_conf": {"ctc_weight": 1.0},
    "specaug": "specaug",
    "optim": "adam",  # an ESPnet training key: not the model's
    "token_list": ["<blank>", "a", "<sos/eos>"],
}

RECIPE = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 96, "num_blocks": 4, "dropout_rate": 0.1},
    "decoder": "transformer",
    "decoder_conf": {"num_blocks": 2},
    "frontend_conf": {"fs": 16000, "n_mels": 80},
    "specaug": None,
    "trainer": {"max_steps": 100},
}


def package(tmp_path: Path, config: dict | None = None) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.pth").write_bytes(b"")
    (pkg / "config.yaml").write_text(yaml.safe_dump(config or PACKAGE_CONFIG))
    return pkg


def test_the_model_keys_are_the_packages_and_the_training_sections_the_recipes(tmp_path):
    data, record = inherit_architecture(RECIPE, package(tmp_path), explicit=[])
    assert data["encoder_conf"] == PACKAGE_CONFIG["encoder_conf"]
    assert data["frontend_conf"] == {"fs": 8000, "n_mels": 40}
    assert data["decoder"] is None, "the recipe's decoder must not be kept beside the package's"
    assert "decoder_conf" not in data  # the package has none: ESPnet's default, not the recipe's
    assert data["trainer"] == {"max_steps": 100}
    assert data["specaug"] is None, "SpecAugment is the recipe's (it has no weights)"
    assert "optim" not in data and "token_list" not in data
    assert record["keys"] == [k for k in ARCHITECTURE_KEYS if k in PACKAGE_CONFIG]
    assert record["overridden"] == [] and len(record["config_sha256"]) == 64
    assert record["from"] == str(tmp_path / "pkg/config.yaml")


def test_a_key_the_overrides_set_wins_inside_the_packages_mapping(tmp_path):
    recipe = {**RECIPE, "encoder_conf": {**RECIPE["encoder_conf"], "dropout_rate": 0.3}}
    data, record = inherit_architecture(
        recipe, package(tmp_path), explicit=["encoder_conf.dropout_rate", "trainer.max_steps"]
    )
    assert data["encoder_conf"] == {"output_size": 16, "num_blocks": 1, "dropout_rate": 0.3}
    assert record["overridden"] == ["encoder_conf.dropout_rate"]


def test_a_component_the_overrides_name_is_kept_whole(tmp_path):
    data, record = inherit_architecture(RECIPE, package(tmp_path), explicit=["decoder"])
    assert data["decoder"] == "transformer"
    assert record["overridden"] == ["decoder"]


def test_a_bare_state_dict_has_no_architecture_and_the_error_says_what_to_do(tmp_path):
    (tmp_path / "w.pth").write_bytes(b"")
    with pytest.raises(AsrflowError, match=r"no config\.yaml.*init\.architecture: recipe"):
        read_architecture(tmp_path / "w.pth")
    with pytest.raises(AsrflowError, match=r"names no encoder"):
        read_architecture(package(tmp_path, {"optim": "adam"}))


def test_a_global_mvn_stats_file_is_found_beside_the_package(tmp_path):
    pkg = package(
        tmp_path,
        {**PACKAGE_CONFIG, "normalize": "global_mvn",
         "normalize_conf": {"stats_file": "exp/asr_stats/train/feats_stats.npz"}},
    )  # fmt: skip
    with pytest.raises(AsrflowError, match=r"normalize_conf\.stats_file"):
        read_architecture(pkg)
    (pkg / "feats_stats.npz").write_bytes(b"")
    assert read_architecture(pkg)[1]["normalize_conf"]["stats_file"] == str(pkg / "feats_stats.npz")


def test_which_runs_take_the_packages_architecture():
    assert not takes_package_architecture(None)
    assert takes_package_architecture({"model": "p", "architecture": "package"})
    assert not takes_package_architecture({"model": "p", "architecture": "recipe"})


def test_an_auto_plan_leaves_the_model_keys_to_the_package():
    plan = make_plan("r", corpus(), inherited=ARCHITECTURE_KEYS)
    by_key = {c["key"]: c for c in plan["choices"]}
    assert by_key["encoder_conf.output_size"]["from_package"]
    assert by_key["frontend_conf.fs"]["from_package"] and not by_key["specaug"].get("from_package")
    assert not by_key["trainer.max_steps"].get("from_package")
    assert "encoder_conf" not in plan["values"] and "trainer" in plan["values"]
    applied = apply_plan({"encoder_conf": {"output_size": 7}}, plan, [])
    assert applied["encoder_conf"] == {"output_size": 7}
    assert applied["trainer"]["max_steps"] == by_key["trainer.max_steps"]["value"]


def test_the_train_spec_takes_the_packages_model_and_records_where_from(tmp_path):
    pkg = package(tmp_path)
    recipe = {"settings": RECIPE, "operational": {}, "name": "mine", "explicit": []}
    inputs = {"train_0": "t.jsonl.gz", "dev": "d", "bpe_model": "b", "tokens": "k"}
    init = {"model": str(pkg), "include": ["*"], "exclude": [], "architecture": "package",
            "reuse_tokenizer": False}  # fmt: skip
    spec = spec_from_inputs("r", inputs, normalization={}, recipe=recipe, init=init)
    assert spec.recipe.model["encoder_conf"]["output_size"] == 16
    assert spec.architecture["from"] == str(pkg / "config.yaml")
    spec = spec_from_inputs(
        "r", inputs, normalization={}, recipe=recipe, init={**init, "architecture": "recipe"}
    )
    assert spec.recipe.model["encoder_conf"]["output_size"] == 96 and spec.architecture is None

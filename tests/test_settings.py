"""Tests for asrflow.settings.with_defaults: the schema is the one source of the config's defaults,
filled in exactly as Snakemake's validate fills them, and no module repeats them."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import validate as snakemake_validate

import asrflow
from asrflow.errors import AsrflowError
from asrflow.settings import schema_file, with_defaults
from tests.configs import config_with_runs

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = ROOT / "config" / "config.schema.yaml"

SEVERAL_RUNS = {
    "corpora": {
        "a": {"source": "synthetic", "synthetic": {"num_utterances": 60}},
        "b": {"source": "nemo", "manifests": {"train": "b/train.jsonl", "dev": "b/dev.jsonl"}},
    },
    "tokenizers": {"t": {"corpus": "a", "model_type": "char"}},
    "runs": {
        "plain": {"corpora": ["a"], "tokenizer": "t", "recipe": "tiny"},
        "big": {
            "corpora": ["a", "b"],
            "weights": [1, 3],
            "tokenizer": "t",
            "recipe": "tiny",
            "resources": {"devices": 4, "nodes": 2},
            "overrides": {"trainer": {"max_steps": 5}},
        },
        "tuned": {
            "corpora": ["b"],
            "tokenizer": "t",
            "recipe": "tiny",
            "init": {"model": "exp/asr_base", "exclude": ["ctc.*"]},
        },
    },
    "smoke": {"max_steps": 2},
    "evaluation": {"decoding": {"mode": "beam"}},
}


def test_the_run_defaults_are_filled_in():
    runs = with_defaults(SEVERAL_RUNS)["runs"]
    assert runs["plain"]["resources"] == {
        "devices": 0,
        "nodes": 1,
        "cpus_per_device": 2,
        "mem_mb": 8000,
        "runtime": 60,
        "launcher": "auto",
    }
    assert runs["plain"]["overrides"] == {} and "init" not in runs["plain"]  # init: no default
    assert runs["big"]["resources"] == {**runs["plain"]["resources"], "devices": 4, "nodes": 2}
    assert runs["big"]["overrides"] == {"trainer": {"max_steps": 5}}
    assert runs["tuned"]["init"] == {
        "model": "exp/asr_base",
        "include": ["*"],
        "exclude": ["ctc.*"],
        "architecture": "package",
        "reuse_tokenizer": False,
        "freeze": [],
    }


def test_the_top_level_sections_are_filled_in():
    config = with_defaults(SEVERAL_RUNS)
    assert config["smoke"] == {"max_train_cuts": 16, "max_dev_cuts": 4, "max_steps": 2}
    assert config["evaluation"]["decoding"]["beam_size"] == 10
    assert config["evaluation"]["resources"]["devices"] == 0
    assert config["corpora"]["a"]["synthetic"]["num_utterances"] == 60
    assert config["text_normalization"]["lowercase"] is True


@pytest.mark.parametrize(
    "config",
    [SEVERAL_RUNS, yaml.safe_load((ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))],
    ids=["several-runs", "shipped-config"],
)
def test_equals_what_snakemake_validate_leaves_in_the_config(config):
    by_snakemake = copy.deepcopy(config)
    snakemake_validate(by_snakemake, str(SCHEMA_PATH))
    assert with_defaults(config) == by_snakemake


def test_the_input_is_not_modified_and_runs_share_no_default():
    given = copy.deepcopy(SEVERAL_RUNS)
    config = with_defaults(given)
    assert given == SEVERAL_RUNS
    config["runs"]["plain"]["resources"]["devices"] = 8  # Snakemake's runs share this dict
    assert config["runs"]["tuned"]["resources"]["devices"] == 0
    assert with_defaults(SEVERAL_RUNS)["runs"]["plain"]["resources"]["devices"] == 0


def test_an_invalid_config_is_one_readable_line():
    bad = copy.deepcopy(SEVERAL_RUNS)
    bad["runs"]["big"]["resources"]["nodes"] = 0
    with pytest.raises(AsrflowError) as caught:
        with_defaults(bad, source="config/config.yaml")
    message = str(caught.value)
    assert message.startswith("config/config.yaml, runs.big.resources.nodes: 0 is less than")
    assert "\n" not in message.strip()
    bad["runs"]["big"]["resources"] = {"gpus": 4}
    with pytest.raises(AsrflowError, match=r"unknown key\(s\) 'gpus'.*devices"):
        with_defaults(bad)


def test_the_schema_is_found_beside_the_package():
    assert schema_file() == SCHEMA_PATH
    assert Path(asrflow.__file__).resolve().parents[2] / "config" == SCHEMA_PATH.parent


@pytest.mark.skipif(shutil.which("uv") is None, reason="builds the wheel with uv (README set-up)")
def test_a_wheel_installed_outside_the_repository_reads_its_own_copy_of_the_schema(tmp_path):
    subprocess.run(
        ["uv", "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("asrflow-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # a pure-Python wheel installs by unpacking
    assert (site / "asrflow" / "config.schema.yaml").read_bytes() == SCHEMA_PATH.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import asrflow, asrflow.data.filter, asrflow.settings as s; "
        "print(asrflow.__file__); print(s.schema_file())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=elsewhere,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    package = site / "asrflow"
    assert out == [str(package / "__init__.py"), str(package / "config.schema.yaml")]


def test_the_test_helper_gives_a_validated_config():
    config = config_with_runs(a={"resources": {"devices": 2}})
    assert config == with_defaults(config)
    assert config["runs"]["a"]["resources"]["launcher"] == "auto"


# --- no copies of the schema's defaults ------------------------------------------------------

READERS = ("runs.py", "train/run/launch.py", "train/init/weights.py")
"""Modules that read the validated config (settings.py's own docstring names the pattern)."""

DEFAULTED_GET = re.compile(r"""\.get\(\s*["'](\w+)["']\s*,\s*([^)]*)\)""")


def defaulted_keys(node: Any) -> Iterator[str]:
    """The name of every property of the schema that has a default, at any depth."""
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            if isinstance(sub, dict) and "default" in sub:
                yield name
        for sub in node.values():
            yield from defaulted_keys(sub)
    elif isinstance(node, list):
        for sub in node:
            yield from defaulted_keys(sub)


def copied_defaults(source: str, keys: set[str]) -> list[str]:
    """``.get("<key>", <default>)`` calls in ``source`` whose key the schema gives a default."""
    return [m.group(0) for m in DEFAULTED_GET.finditer(source) if m.group(1) in keys]


def test_no_module_repeats_a_schema_default():
    keys = set(defaulted_keys(yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))))
    assert {"resources", "overrides", "devices", "launcher", "max_steps"} <= keys
    package = Path(asrflow.__file__).parent
    found = {
        module: copied
        for module in READERS
        if (copied := copied_defaults((package / module).read_text(encoding="utf-8"), keys))
    }
    assert found == {}, "index the validated config instead (asrflow.settings.with_defaults)"


def test_the_scan_sees_a_copied_default():
    keys = {"devices", "resources"}
    source = 'res = r.get("resources", {})\nn = int(res.get( "devices" , 0))\nr.get("init")\n'
    assert copied_defaults(source, keys) == ['.get("resources", {})', '.get( "devices" , 0)']
    assert copied_defaults('overrides.get("trainer", {})', keys) == []


def test_the_default_baseline_is_the_first_run_as_written_not_the_first_sorted():
    """The workflow sorts the config's keys (rules/common.smk); the report's default baseline
    must still be the first run of the file."""
    from asrflow.replicas import expand_replicas
    from asrflow.settings import with_first_run_as_baseline

    config = with_defaults(
        {
            "corpora": {"c": {"source": "synthetic"}},
            "runs": {"zeta": {"corpora": ["c"], "seeds": [3, 4]}, "alpha": {"corpora": ["c"]}},
        }
    )
    assert config["report"]["baseline_run"] is None  # the schema's default
    config.update(with_first_run_as_baseline(config))
    assert config["report"]["baseline_run"] == "zeta"
    assert expand_replicas(config)["report"]["baseline_run"] == "zeta-seed3"
    named = {**config, "report": {**config["report"], "baseline_run": "alpha"}}
    assert with_first_run_as_baseline(named) == {}

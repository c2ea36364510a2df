"""Tests for config/config.schema.yaml: the shipped config validates, defaults are filled in
the way Snakemake fills them, every property is documented, and bad corpora are rejected."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator, ValidationError
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate as snakemake_validate

from asrflow import config_check, project
from asrflow.corpus.plan import SyntheticCorpusConfig
from asrflow.data.filter import FilterConfig
from asrflow.data.issues import ValidationConfig
from asrflow.errors import AsrflowError
from asrflow.evaluate.decode import Decoding
from asrflow.evaluate.stages import decoding_from_config
from asrflow.settings import config_error_message, filling_validator, with_defaults
from asrflow.text import TextNormalization
from asrflow.tokenizer import TokenizerConfig

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_PATH = ROOT / "config" / "config.schema.yaml"
CONFIG_PATH = ROOT / "config" / "config.yaml"


def load_schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))


def load_config() -> dict[str, Any]:
    return yaml.safe_load(CONFIG_PATH.read_text(encoding="utf-8"))


def fill(config: dict[str, Any]) -> dict[str, Any]:
    """Validate ``config`` against the schema (raising ValidationError) and fill defaults."""
    filling_validator(load_schema()).validate(config)
    return config


def errors(config: dict[str, Any]) -> list[ValidationError]:
    return list(Draft202012Validator(load_schema()).iter_errors(config))


def nemo(**extra: Any) -> dict[str, Any]:
    return {"corpora": {"mine": {"source": "nemo", **extra}}}


# --- the schema itself -----------------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = load_schema()
    assert schema["$schema"] == Draft202012Validator.META_SCHEMA["$schema"]
    Draft202012Validator.check_schema(schema)


def documented_properties(node: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every declared property (path, subschema) reachable through properties,
    additionalProperties, items and $defs. Constraint branches (oneOf/anyOf/allOf/not) only
    restate properties declared above, so they are not descended into."""
    if not isinstance(node, dict):
        return
    for name, sub in node.get("properties", {}).items():
        path = f"{where}.{name}" if where else name
        yield path, sub
        yield from documented_properties(sub, path)
    for key in ("additionalProperties", "items"):
        if isinstance(node.get(key), dict):
            yield from documented_properties(node[key], f"{where}.<{key}>")
    for name, sub in node.get("$defs", {}).items():
        yield from documented_properties(sub, f"$defs.{name}")


def test_every_property_has_a_description() -> None:
    schema = load_schema()
    props = dict(documented_properties(schema, ""))
    # the walk reaches the top level, both $defs and their nested objects
    for path in (
        "$defs.normalization.lowercase",
        "evaluation.decoding.mode",
        "corpora",
        "tokenizers",
        "$defs.corpus.source",
        "$defs.corpus.synthetic.snr_db",
        "$defs.corpus.holdout.fractions",
        "$defs.corpus.validation.duration_tolerance",
        "$defs.corpus.filter.max_chars_per_second",
        "$defs.tokenizer.max_piece_length",
    ):
        assert path in props
    undocumented = [
        path
        for path, sub in props.items()
        if not (isinstance(sub.get("description"), str) and sub["description"].strip())
    ]
    assert undocumented == []
    assert isinstance(schema.get("description"), str)


def test_every_property_holds_only_schema_keywords() -> None:
    """An unquoted comma in a flow-mapping description ("Shortest utterance kept, in seconds.")
    cut the description short and added a stray key ("in seconds.") to the property."""
    known = set(Draft202012Validator.VALIDATORS) | {
        "description", "default", "title", "examples", "$defs", "$schema", "$comment",
    }  # fmt: skip
    stray = {
        path: sorted(set(sub) - known)
        for path, sub in documented_properties(load_schema(), "")
        if set(sub) - known
    }
    assert stray == {}


def test_description_walk_catches_a_missing_description() -> None:
    schema = load_schema()
    del schema["$defs"]["corpus"]["properties"]["validation"]["properties"]["full_decode"][
        "description"
    ]
    missing = [p for p, sub in documented_properties(schema, "") if "description" not in sub]
    assert missing == ["$defs.corpus.validation.full_decode"]


def test_every_default_is_valid_for_its_own_property() -> None:
    schema = load_schema()
    for path, sub in documented_properties(schema, ""):
        if "default" in sub:
            resolved = {**sub, "$defs": schema["$defs"]}
            assert Draft202012Validator(resolved).is_valid(sub["default"]), path


# --- the shipped config and its defaults -----------------------------------------------------


def test_shipped_config_validates_and_defaults_are_filled() -> None:
    config = fill(load_config())
    demo = config["corpora"]["demo"]
    assert demo["validation"]["duration_tolerance"] == 0.05
    assert demo["validation"]["full_decode"] is False
    assert demo["validation"]["allow_group_overlap"] == []
    assert demo["filter"]["max_chars_per_second"] == 30.0
    assert "sampling_rate" not in demo  # declared or not: an undeclared rate may vary
    assert demo["synthetic"]["num_speakers"] == 33
    assert demo["synthetic"]["num_utterances"] == 1500  # given values are kept
    assert config["text_normalization"]["lowercase"] is True
    assert config["text_normalization"]["unicode_form"] == "NFKC"
    assert config["text_normalization"]["replacements"] == {}
    for tok in config["tokenizers"].values():
        assert tok["max_piece_length"] == 16
        assert tok["character_coverage"] == 1.0
    assert config["tokenizers"]["demo_unigram"]["vocab_size"] == 300  # not the default 200
    config_check.check_config(config)


def test_snakemake_validate_fills_the_same_defaults() -> None:
    """rules/common.smk validates with asrflow.settings.with_defaults (the schema parsed once
    by LibYAML) instead of Snakemake's validate: the two must fill the same defaults. Outside a
    workflow Snakemake's schema path must be absolute."""
    ours = with_defaults(load_config())
    assert ours == fill(load_config())
    theirs = load_config()
    snakemake_validate(theirs, str(SCHEMA_PATH))
    assert theirs == ours
    assert theirs["corpora"]["demo"]["validation"]["duration_tolerance"] == 0.05
    assert theirs["text_normalization"]["lowercase"] is True
    assert theirs["tokenizers"]["demo_unigram"]["max_piece_length"] == 16


def test_snakemake_validate_rejects_a_bad_config() -> None:
    config = load_config()
    config["corpora"]["demo"]["source"] = "wav"
    with pytest.raises(WorkflowError):
        snakemake_validate(config, str(SCHEMA_PATH))


def test_minimal_config_gets_every_section() -> None:
    config = fill({"corpora": {"demo": {"source": "synthetic"}}})
    top = load_schema()["properties"]
    assert set(config) == {"corpora"} | {k for k, v in top.items() if "default" in v}
    assert {"text_normalization", "tokenizers"} <= set(config)
    assert config["tokenizers"] == {}
    demo = config["corpora"]["demo"]
    assert set(demo) == {
        "source",
        "synthetic",
        "slice_fields",
        "validation",
        "filter",
    }
    assert demo["slice_fields"] == []  # none unless a corpus names its own (the demo does)


def test_holdout_defaults() -> None:
    config = fill(nemo(holdout={"manifest": "all.jsonl"}))
    holdout = config["corpora"]["mine"]["holdout"]
    assert holdout == {
        "manifest": "all.jsonl",
        "by": "speaker",
        "fractions": {"dev": 0.1, "test": 0.1},
        "seed": 0,
    }
    assert project.splits(config, "mine") == ["train", "dev", "test"]


def test_schema_defaults_match_the_code_defaults() -> None:
    """The schema fills every key, so its defaults are what runs; the settings dataclasses take
    theirs from it (:func:`asrflow.settings.schema_defaults`), so one built without a config (a
    test, a benchmark) runs what a config that leaves the keys out runs."""
    config = fill(
        {
            "corpora": {"demo": {"source": "synthetic"}},
            "tokenizers": {"t": {"corpus": "demo"}},
        }
    )
    demo = config["corpora"]["demo"]
    assert FilterConfig(**demo["filter"]) == FilterConfig()
    assert "threads" not in demo["validation"]  # a resource, set by the rule
    assert ValidationConfig.from_dict(demo["validation"]) == ValidationConfig()
    assert TextNormalization.from_dict(config["text_normalization"]) == TextNormalization()
    assert SyntheticCorpusConfig(**demo["synthetic"]) == SyntheticCorpusConfig()
    tok = dict(config["tokenizers"]["t"])
    del tok["corpus"]
    assert TokenizerConfig(**tok) == TokenizerConfig()
    resolved = {**decoding_from_config(config["evaluation"]).__dict__, "mode": "greedy_ctc"}
    assert Decoding(**resolved) == Decoding()


NOT_CONFIG_KEYS = {
    ("Bootstrap", "seed"): "the bootstrap's seed, fixed by the scoring contract",
    ("Batching", "seed"): "a recipe key (config/recipes/), not the config's",
    ("TrainerConfig", "seed"): "a recipe key (config/recipes/), not the config's",
    ("FoldSettings", "seed"): "a real-speech fold's seed (asrflow.corpus.folds), not a config key",
    ("VoiceSettings", "seed"): "synthetic voices' seed (asrflow.corpus.voices), not a config key",
}
"""Dataclass fields whose name and default happen to equal a config key's, and why that is not
a second copy of the schema's default."""


def _schema_defaults_by_key() -> dict[str, list[tuple[str, Any]]]:
    """Every scalar default in the schema: key name -> [(dotted path, default)]."""
    found: dict[str, list[tuple[str, Any]]] = {}

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for name, sub in (node.get("properties") or {}).items():
            if isinstance(sub, dict) and sub.get("default") not in (None, {}):
                found.setdefault(name, []).append((f"{path}.{name}", sub["default"]))
            walk(sub, f"{path}.{name}")
        for key in ("additionalProperties", "items"):
            walk(node.get(key), f"{path}.*")
        for name, sub in (node.get("$defs") or {}).items():
            walk(sub, f"$defs.{name}")
        for key in ("oneOf", "anyOf", "allOf"):
            for sub in node.get(key) or []:
                walk(sub, path)

    walk(load_schema(), "")
    return found


def _literal_dataclass_defaults() -> Iterator[tuple[str, str, str, Any]]:
    """(file:line, class, field, value) of every dataclass field in src/ whose default is
    written as a literal."""
    import ast

    for path in sorted((ROOT / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef) or not any(
                "dataclass" in ast.unparse(d) for d in cls.decorator_list
            ):
                continue
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    try:
                        value = ast.literal_eval(stmt.value) if stmt.value else None
                    except ValueError:
                        continue  # not a literal: e.g. taken from schema_defaults
                    where = f"{path.relative_to(ROOT)}:{stmt.lineno}"
                    yield where, cls.name, stmt.target.id, value


def test_no_dataclass_in_src_writes_a_schema_default_again() -> None:
    """One source of defaults: a settings dataclass takes a config key's default from the schema
    (``schema_defaults``), never as a literal that could drift from it."""
    schema = _schema_defaults_by_key()
    assert ("$defs.corpus.filter.min_duration", 0.3) in schema["min_duration"]  # the walk works
    copies = []
    for where, cls, name, value in _literal_dataclass_defaults():
        if (cls, name) in NOT_CONFIG_KEYS or value is None:
            continue
        for key, default in schema.get(name, []):
            if value == (tuple(default) if isinstance(default, list) else default):
                copies.append(f"{where} {cls}.{name} = {value!r} repeats {key}")
    assert not copies, "\n".join(copies)


def test_walking_the_source_would_find_a_copied_default() -> None:
    """The walk above sees literal defaults (so an empty result means something)."""
    found = {(cls, name): value for _, cls, name, value in _literal_dataclass_defaults()}
    assert found[("SyntheticCorpusConfig", "sample_rate")] == 16000
    assert found[("Decoding", "mode")] == "greedy_ctc"


# --- rejected configs ------------------------------------------------------------------------


def assert_rejected(config: dict[str, Any], *fragments: str) -> None:
    found = errors(config)
    assert found, "config was accepted"
    text = "\n".join(f"{list(e.absolute_path)} {e.message}" for e in found)
    for fragment in fragments:
        assert fragment in text, text
    with pytest.raises(ValidationError):
        fill(config)


def test_good_corpora_are_accepted() -> None:
    for config in (
        nemo(manifests={"train": "t.jsonl", "dev": "d.jsonl"}),
        nemo(holdout={"manifest": "all.jsonl", "fractions": {"eval": 0.2}}),
        {"corpora": {"k": {"source": "kaldi", "manifests": {"train": "data/train"}}}},
        {"corpora": {"l": {"source": "lhotse", "holdout": {"manifest": "c.jsonl.gz"}}}},
    ):
        assert errors(config) == [], config


def test_manifests_and_holdout_together_are_rejected() -> None:
    assert_rejected(
        nemo(manifests={"train": "t.jsonl"}, holdout={"manifest": "all.jsonl"}),
        "['corpora', 'mine']",
    )


def test_neither_manifests_nor_holdout_is_rejected() -> None:
    assert_rejected(nemo(), "['corpora', 'mine']")


def test_synthetic_with_manifests_is_rejected() -> None:
    assert_rejected(
        {"corpora": {"demo": {"source": "synthetic", "manifests": {"train": "t.jsonl"}}}},
        "['corpora', 'demo']",
    )


def test_unknown_key_is_rejected() -> None:
    assert_rejected(nemo(manifests={"train": "t.jsonl"}, manifset="x"), "'manifset'")
    assert_rejected(
        {"corpora": {"demo": {"source": "synthetic"}}, "tokenisers": {}}, "'tokenisers'"
    )
    assert_rejected(
        {"corpora": {"demo": {"source": "synthetic", "validation": {"tolerance": 0.1}}}},
        "'tolerance'",
    )


def test_bad_source_is_rejected() -> None:
    assert_rejected(
        {"corpora": {"x": {"source": "wav", "manifests": {"train": "t"}}}},
        "['corpora', 'x', 'source'] 'wav' is not one of",
    )
    assert_rejected({"corpora": {"x": {"manifests": {"train": "t"}}}}, "'source' is a required")


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"corpora": {}}, "should be non-empty"),
        ({}, "'corpora' is a required"),
        (nemo(manifests={}), "['corpora', 'mine', 'manifests']"),
        (nemo(manifests={"train/x": "t"}), "does not match"),
        (nemo(holdout={"manifest": "a", "fractions": {"train": 0.1}}), "fractions"),
        (nemo(holdout={"manifest": "a", "fractions": {"dev": 1.0}}), "fractions"),
        (nemo(holdout={"by": "speaker"}), "'manifest' is a required"),
        (
            {"corpora": {"d": {"source": "synthetic"}}, "tokenizers": {"t": {"vocab_size": 10}}},
            "'corpus' is a required",
        ),
        (
            {
                "corpora": {"d": {"source": "synthetic"}},
                "tokenizers": {"t": {"corpus": "d", "model_type": "wordpiece"}},
            },
            "'wordpiece' is not one of",
        ),
        (
            {"corpora": {"d": {"source": "synthetic"}}, "text_normalization": {"lowercase": "yes"}},
            "is not of type 'boolean'",
        ),
    ],
)
def test_other_bad_configs_are_rejected(config: dict[str, Any], fragment: str) -> None:
    assert_rejected(config, fragment)


# --- what the user sees ----------------------------------------------------------------------


def _snakemake_error(config: dict[str, Any]) -> WorkflowError:
    with pytest.raises(WorkflowError) as err:
        snakemake_validate(config, str(SCHEMA_PATH))
    return err.value


def test_unknown_key_is_one_line_naming_the_key_not_the_schema() -> None:
    """Issue 12, item 7: an unknown key printed ~400 lines of schema under the useful one."""
    config = nemo(manifests={"train": "t.jsonl"}, sampling_rte=16000)
    message = config_error_message(_snakemake_error(config), "config")
    assert message.startswith("config, corpora.mine: unknown key(s) 'sampling_rte'")
    assert "sampling_rate" in message  # the allowed keys, where the typo is obvious
    assert len(message.splitlines()) == 1 and len(message) < 400


def test_wrong_value_names_the_path_and_the_description() -> None:
    config = nemo(manifests={"train": "t.jsonl"}, sampling_rate=-8000)
    message = config_error_message(_snakemake_error(config), "config")
    assert message.startswith("config, corpora.mine.sampling_rate: -8000 is less than")
    assert "Expected: Declared sampling rate" in message
    assert len(message.splitlines()) == 1


def test_report_baseline_run_defaults_to_none_and_must_name_a_run() -> None:
    config = fill(load_config())
    assert config["report"] == {"baseline_run": None}  # the first run is the baseline
    config["report"]["baseline_run"] = "demo_ctc"
    config_check.check_config(fill(config))
    config["report"]["baseline_run"] = "demo_ctx"
    with pytest.raises(AsrflowError) as err:
        config_check.check_config(config)
    message = str(err.value)
    assert message.startswith("report.baseline_run: unknown run 'demo_ctx'")
    assert "demo_ctc" in message and len(message.splitlines()) == 1
    assert_rejected({**load_config(), "report": {"baseline_run": 3}}, "is not of type")

"""Tests for asrflow.project and asrflow.config_check: what the config declares (corpora and their
splits, runs, tokenizers, eval sets, the default targets) and the cross-checks of it."""

from __future__ import annotations

import pytest

from asrflow import config_check, layout, project, runs
from asrflow.errors import AsrflowError

DEFAULT_FRACTIONS = {"dev": 0.1, "test": 0.1}
"""The schema's default holdout fractions (a corpus whose holdout names none gets them)."""

CONFIG = {
    "corpora": {
        "demo": {"source": "synthetic"},
        "mine": {
            "source": "nemo",
            "manifests": {"test": "d/test.jsonl", "train": "d/train.jsonl", "dev": "d/dev.jsonl"},
        },
        "kal": {"source": "kaldi", "manifests": {"zz": "k/zz", "train": "k/train", "aa": "k/aa"}},
        "held": {
            "source": "nemo",
            "holdout": {"manifest": "d/all.jsonl", "by": "session", "fractions": DEFAULT_FRACTIONS},
        },
        "held3": {
            "source": "lhotse",
            "holdout": {"manifest": "h/all.jsonl.gz", "fractions": {"val": 0.05, "eval": 0.1}},
        },
    },
    "tokenizers": {"t1": {"corpus": "demo"}, "t2": {"corpus": "mine", "vocab_size": 50}},
}


# --- corpora and splits ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("demo", ["train", "dev", "test"]),
        ("mine", ["train", "dev", "test"]),
        ("kal", ["train", "aa", "zz"]),
        ("held", ["train", "dev", "test"]),  # the schema's default fractions
        ("held3", ["train", "eval", "val"]),
    ],
)
def test_splits_train_first(name: str, expected: list[str]) -> None:
    assert project.splits(CONFIG, name) == expected


def test_uses_holdout() -> None:
    assert [n for n in CONFIG["corpora"] if project.uses_holdout(CONFIG, n)] == ["held", "held3"]


def test_source_manifest() -> None:
    assert project.source_manifest(CONFIG, "demo", "dev") == "results/corpora/demo/dev.jsonl"
    assert project.source_manifest(CONFIG, "mine", "train") == "d/train.jsonl"
    assert project.source_manifest(CONFIG, "kal", "zz") == "k/zz"
    assert project.source_manifest(CONFIG, "held", layout.ALL) == "d/all.jsonl"
    assert project.source_manifest(CONFIG, "held3", "all") == "h/all.jsonl.gz"


def test_source_manifest_unknown_split() -> None:
    with pytest.raises(AsrflowError, match=r"corpus 'mine' has no manifest for split 'eval'"):
        project.source_manifest(CONFIG, "mine", "eval")


@pytest.mark.parametrize("part", ["train", "dev", "test"])
def test_source_manifest_of_holdout_corpus_only_has_all(part: str) -> None:
    with pytest.raises(AsrflowError, match=rf"'held' is split by holdout.*{part!r}"):
        project.source_manifest(CONFIG, "held", part)


def test_unknown_corpus_lists_the_known_ones() -> None:
    with pytest.raises(AsrflowError, match=r"unknown corpus 'nope' \(config has: demo, mine, kal"):
        project.splits(CONFIG, "nope")
    with pytest.raises(AsrflowError, match=r"config has: none"):
        project.corpus({}, "nope")


# --- check_config ----------------------------------------------------------------------------


def test_check_config_accepts_good_config() -> None:
    config_check.check_config(CONFIG)
    config_check.check_config({"corpora": {"demo": {"source": "synthetic"}}})  # no tokenizers key


def test_check_config_requires_train_split() -> None:
    config = {
        "corpora": {
            "demo": {"source": "synthetic"},
            "bad": {"source": "nemo", "manifests": {"dev": "a", "Train": "b"}},
        }
    }
    config_check.check_config(config)  # an eval-only corpus needs no train split ...
    config["tokenizers"] = {"t": {"corpus": "bad"}}  # ... one that is trained on does
    with pytest.raises(AsrflowError) as err:
        config_check.check_config(config)
    message = str(err.value)
    assert message.startswith("corpora.bad:")
    assert "'train' is required" in message
    assert "Train, dev" in message


def test_check_config_tokenizer_unknown_corpus() -> None:
    config = {**CONFIG, "tokenizers": {"t1": {"corpus": "demo"}, "bad_tok": {"corpus": "dmeo"}}}
    with pytest.raises(AsrflowError) as err:
        config_check.check_config(config)
    message = str(err.value)
    assert message.startswith("tokenizers.bad_tok.corpus:")
    assert "'dmeo'" in message
    assert "demo, mine, kal, held, held3" in message


# --- all_targets -----------------------------------------------------------------------------


def test_all_targets() -> None:
    config = {
        "corpora": {
            "demo": {"source": "synthetic"},
            "held": {
                "source": "nemo",
                "holdout": {"manifest": "a.jsonl", "fractions": DEFAULT_FRACTIONS},
            },
        },
        "tokenizers": {"tok": {"corpus": "demo"}},
    }
    assert project.all_targets(config) == [
        "results/data/demo/validation.txt",
        "results/data/demo/filtered/train.jsonl.gz",
        "results/data/demo/filtered/dev.jsonl.gz",
        "results/data/demo/filtered/test.jsonl.gz",
        "results/data/held/validation.txt",
        "results/data/held/filtered/train.jsonl.gz",
        "results/data/held/filtered/dev.jsonl.gz",
        "results/data/held/filtered/test.jsonl.gz",
        "results/tokenizers/tok/tokens.txt",
    ]


def test_all_targets_covers_every_split_and_tokenizer() -> None:
    targets = project.all_targets(CONFIG)
    assert len(targets) == len(set(targets))
    for name in CONFIG["corpora"]:
        assert layout.validation_report(name, "txt") in targets
        for split in project.splits(CONFIG, name):
            assert layout.filtered(name, split) in targets
    assert layout.tokenizer_file("t1", "tokens.txt") in targets
    assert layout.tokenizer_file("t2", "tokens.txt") in targets
    # the imported "all" manifest of a holdout corpus is intermediate, not a target
    assert not any("/all." in t for t in targets)


def test_eval_sets_dev_first_then_tests_then_extra_sets() -> None:
    config = {
        "corpora": {
            "demo": {"source": "synthetic"},
            "suppliers": {"source": "nemo", "manifests": {"messages": "m.jsonl"}},
        },
        "tokenizers": {"t": {"corpus": "demo"}},
        "runs": {"r": {"corpora": ["demo"], "tokenizer": "t", "recipe": "x"}},
        "evaluation": {"extra_sets": ["suppliers.messages"]},
    }
    config_check.check_config(config)
    assert project.eval_sets(config, "r") == ["demo.dev", "demo.test", "suppliers.messages"]
    assert project.dev_set(config, "r") == "demo.dev"
    assert project.eval_set_split(config, "suppliers.messages") == ("suppliers", "messages")
    config["evaluation"]["extra_sets"] = ["suppliers.test"]
    with pytest.raises(AsrflowError, match=r"suppliers\.test"):
        config_check.check_config(config)


def test_a_fine_tuning_run_has_a_baseline_only_when_its_init_model_has_a_config(tmp_path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "model.pth").write_bytes(b"")
    run = {"corpora": ["demo"], "tokenizer": "t", "recipe": "x", "init": {"model": str(package)}}
    config = {"corpora": {"demo": {"source": "synthetic"}}, "runs": {"r": run}}
    assert not runs.has_baseline(config, "r")  # weights without a model description
    (package / "config.yaml").write_text("encoder: conformer\n")
    assert runs.has_baseline(config, "r")
    run["init"]["model"] = str(tmp_path / "not-made-yet")
    assert not runs.has_baseline(config, "r")
    del run["init"]
    assert not runs.has_baseline(config, "r")


def test_split_sources_name_each_splits_manifest() -> None:
    """Issue 30: what an empty split's message names (the holdout manifest for every split)."""
    config = {
        "corpora": {
            "m": {"source": "nemo", "manifests": {"train": "d/train.jsonl", "dev": "d/dev.jsonl"}},
            "h": {
                "source": "nemo",
                "holdout": {"manifest": "d/all.jsonl", "fractions": DEFAULT_FRACTIONS},
            },
        }
    }
    assert project.split_sources(config, "m") == {"train": "d/train.jsonl", "dev": "d/dev.jsonl"}
    assert project.split_sources(config, "h") == dict.fromkeys(
        ("train", "dev", "test"), "d/all.jsonl"
    )


def test_a_run_that_names_no_tokenizer_gets_an_auto_one_on_its_first_corpus() -> None:
    from asrflow.project import with_default_tokenizers

    config = {
        "corpora": {"a": {}, "b": {}},
        "tokenizers": {"mine": {"corpus": "b"}},
        "runs": {"x": {"corpora": ["a", "b"]}, "y": {"corpora": ["b"], "tokenizer": "mine"}},
    }
    out = with_default_tokenizers(config)
    assert out["runs"]["x"]["tokenizer"] == "a_auto"
    assert out["tokenizers"]["a_auto"] == {"corpus": "a", "model_type": "auto"}
    assert out["runs"]["y"] == config["runs"]["y"] and "tokenizer" not in config["runs"]["x"]


def test_a_fine_tuning_run_keeps_its_starting_models_tokenizer_by_default() -> None:
    """Issue 32: a run whose init carries a tokenizer (a package or exp dir, or another run's
    selection) takes it (``init``); a bare weights file carries none, so the run trains its own;
    a tokenizer named in the config is kept."""
    from asrflow.project import INIT_TOKENIZER, run_tokenizer_file, with_default_tokenizers

    config = {
        "corpora": {"a": {}},
        "tokenizers": {"mine": {"corpus": "a"}},
        "runs": {
            "base": {"corpora": ["a"]},
            "child": {"corpora": ["a"], "init": {"run": "base"}},
            "pkg": {"corpora": ["a"], "init": {"model": "exp/asr_conformer"}},
            "bare": {"corpora": ["a"], "init": {"model": "exp/model.pth"}},
            "named": {"corpora": ["a"], "init": {"run": "base"}, "tokenizer": "mine"},
        },
    }
    out = with_default_tokenizers(config)
    tokenizers = {name: r["tokenizer"] for name, r in out["runs"].items()}
    assert tokenizers == {
        "base": "a_auto",
        "child": INIT_TOKENIZER,
        "pkg": INIT_TOKENIZER,
        "bare": "a_auto",
        "named": "mine",
    }
    assert set(out["tokenizers"]) == {"mine", "a_auto"}
    assert (
        run_tokenizer_file(out, "child", "tokens.txt") == "results/runs/child/tokenizer/tokens.txt"
    )
    assert run_tokenizer_file(out, "named", "bpe.model") == "results/tokenizers/mine/bpe.model"


def test_tokenizer_init_needs_a_model_to_take_it_from() -> None:
    config = {**CONFIG, "runs": {"r": {"corpora": ["demo"], "tokenizer": "init", "recipe": "x"}}}
    with pytest.raises(AsrflowError, match=r"runs\.r\.tokenizer: init .* no init"):
        config_check.check_config(config)
    config["runs"]["r"]["init"] = {"model": "pkg"}
    config_check.check_config(config)

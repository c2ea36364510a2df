"""What differs between two runs (issue 14, section 4): asrflow.report.changes."""

from __future__ import annotations

import copy

import pytest

from asrflow.errors import AsrflowError
from asrflow.params import changed_keys, changed_values
from asrflow.report.changes import (
    CATEGORIES,
    NO_CHANGE,
    baseline_of,
    change_columns,
    split_label,
    what_changed,
)

DEMO = "results/data/demo/filtered/train.jsonl.gz"
OTHER = "results/data/other/filtered/train.jsonl.gz"


def sha(tag: str) -> str:
    return (tag * 64)[:64]


def summary(**over) -> dict:
    """A train summary as asrflow.train.run.runner writes it (the parts the comparison reads)."""
    s = {
        "run": "a",
        "status": "completed",
        "recipe_settings": {
            "optim": {"lr": 0.002, "weight_decay": 1e-6},
            "trainer": {"max_steps": 2400, "devices": 1, "accumulate_grad_batches": 1},
            "batching": {"max_duration": 20.0},
            "model": {"encoder": "conformer"},
        },
        "update_budget": {
            "optimizer_steps": 2400,
            "warmup_steps": 120,
            "effective_batch_seconds": 20.0,
            "max_audio_seconds": 48000.0,
            "peak_lr": 0.002,
        },
        "effective_batch_seconds": 20.0,
        "hashes": {
            "train_cuts": {DEMO: sha("1")},
            "dev_cuts": sha("2"),
            "bpe_model": sha("b"),
            "tokens": sha("t"),
            "recipe": sha("r"),
            "normalization": sha("n"),
            "start_weights": None,
        },
        "init": None,
    }
    for key, value in over.items():
        s[key] = value
    return s


def record(**over) -> dict:
    """The parts of a train step's provenance record the comparison reads."""
    r = {
        "inputs": {
            "train_0": {DEMO: sha("1")},
            "dev": {"results/data/demo/filtered/dev.jsonl.gz": sha("2")},
            "bpe_model": {"results/tokenizers/demo_unigram/bpe.model": sha("b")},
        },
        "params": {"weights": None},
        "code": {
            "git": {"commit": "abc", "dirty": False},
            "script": {"path": "scripts/train.py", "sha256": sha("s")},
            "modules": {"asrflow.train.loop.module": sha("m"), "asrflow.train.loop.loss": sha("l")},
        },
        "packages": {"python": "3.12.3", "torch": "2.5.1", "espnet": "202412"},
    }
    r.update(over)
    return r


def with_recipe(s: dict, section: str, key: str, value) -> dict:
    s = copy.deepcopy(s)
    s["recipe_settings"][section][key] = value
    return s


def test_one_recipe_key_is_one_change_named_by_its_dotted_path():
    a = summary()
    b = with_recipe(a, "optim", "lr", 0.0015)
    changes = what_changed(a, b, record(), record())
    assert changes.categories == ("recipe",)
    assert changes.get("recipe").details == ("optim.lr 0.002 -> 0.0015",)
    assert changes.text() == "recipe: optim.lr 0.002 -> 0.0015"
    assert not changes.confounded


def test_a_recipe_key_and_the_tokenizer_are_confounded():
    a = summary()
    b = with_recipe(a, "optim", "lr", 0.0015)
    b["hashes"]["bpe_model"] = sha("c")
    b["hashes"]["tokens"] = sha("u")
    rb = record()
    rb["inputs"]["bpe_model"] = {"results/tokenizers/demo_bpe/bpe.model": sha("c")}
    changes = what_changed(a, b, record(), rb)
    assert changes.categories == ("tokenizer", "recipe")
    assert changes.confounded
    assert changes.text() == "tokenizer: demo_unigram -> demo_bpe; recipe: optim.lr 0.002 -> 0.0015"
    # without records the tokenizer is named by its hash
    assert what_changed(a, b).get("tokenizer").details == ("bbbbbbbb -> cccccccc",)


def test_identical_runs_differ_in_nothing():
    changes = what_changed(summary(), summary(run="b"), record(), record())
    assert changes.changes == () and changes.text() == NO_CHANGE and not changes.confounded


def test_data_names_the_corpus_and_split_whose_hash_changed():
    a = summary()
    b = copy.deepcopy(a)
    b["hashes"]["train_cuts"] = {DEMO: sha("3"), OTHER: sha("4")}
    changes = what_changed(a, b)
    assert changes.get("data").details == ("demo.train 11111111 -> 33333333", "+other.train")
    assert not changes.confounded  # one cause: the data
    c = copy.deepcopy(a)
    c["hashes"]["dev_cuts"] = sha("5")
    c["hashes"]["normalization"] = sha("6")
    rc = record(params={"weights": [1, 3]})
    details = what_changed(a, c, record(), rc).get("data").details
    assert details == (
        "dev 22222222 -> 55555555",
        "text normalization",
        "corpus weights None -> [1, 3]",
    )


def test_start_weights_code_and_packages():
    a = summary()
    b = copy.deepcopy(a)
    b["hashes"]["start_weights"] = sha("w")
    rb = record()
    rb["code"]["modules"] = {
        "asrflow.train.loop.module": sha("M"),  # changed
        "asrflow.train.loop.loss": sha("l"),
        # imported by this run only: a code path, not a change
        "asrflow.train.init.weights": sha("i"),
    }
    rb["code"]["git"] = {"commit": "def", "dirty": True}  # the commit alone is no change
    rb["packages"] = {"python": "3.12.3", "torch": "2.6.0", "espnet": "202412"}
    changes = what_changed(a, b, record(), rb)
    assert changes.categories == ("start_weights", "code", "packages")
    assert changes.get("start_weights").details == ("none -> wwwwwwww",)
    assert changes.get("code").details == ("asrflow.train.loop.module",)
    assert changes.get("packages").details == ("torch 2.5.1 -> 2.6.0",)
    assert changes.confounded
    # code and packages are compared only where both runs have a record
    assert what_changed(a, b, record(), None).categories == ("start_weights",)
    script = record()
    script["code"]["script"] = {"path": "scripts/train.py", "sha256": sha("S")}
    assert what_changed(a, a, record(), script).get("code").details == ("scripts/train.py",)
    # which keys of the start weights were taken is part of them
    ia, ib = copy.deepcopy(b), copy.deepcopy(b)
    ia["init"] = {"include": ["*"], "exclude": []}
    ib["init"] = {"include": ["*"], "exclude": ["ctc.*"]}
    assert what_changed(ia, ib).get("start_weights").details == ("exclude [] -> ['ctc.*']",)


def test_siblings_from_one_parent_differ_by_what_they_train():
    """A full fine-tune, its frozen-encoder sibling and its LoRA sibling start from the same
    weights: what they train is the difference the report names."""
    full = summary()
    full["init"] = {"include": ["*"], "exclude": [], "freeze": [], "adapter": None}
    frozen, lora = copy.deepcopy(full), copy.deepcopy(full)
    frozen["init"]["freeze"] = ["frontend", "normalize", "encoder"]
    lora["init"]["adapter"] = {"type": "lora", "rank": 2, "alpha": 4, "targets": ["linear_q"]}
    changes = what_changed(full, frozen)
    assert changes.categories == ("start_weights",) and not changes.confounded
    assert changes.get("start_weights").details == (
        "freeze [] -> ['frontend', 'normalize', 'encoder']",
    )
    assert what_changed(full, lora).get("start_weights").details == (
        "adapter none -> lora r2 a4 on linear_q",
    )
    both = what_changed(frozen, lora).get("start_weights").details
    assert both == (
        "freeze ['frontend', 'normalize', 'encoder'] -> []",
        "adapter none -> lora r2 a4 on linear_q",
    )
    assert what_changed(full, copy.deepcopy(full)).categories == ()


def test_effective_batch_and_budget_are_consequences_of_a_recipe_change():
    a = summary()
    b = with_recipe(a, "trainer", "accumulate_grad_batches", 2)
    b["effective_batch_seconds"] = 40.0
    b["update_budget"] = {**a["update_budget"], "effective_batch_seconds": 40.0,
                          "max_audio_seconds": 96000.0}  # fmt: skip
    changes = what_changed(a, b)
    assert changes.categories == ("recipe", "effective_batch", "update_budget")
    assert changes.causes == ("recipe",) and not changes.confounded
    assert changes.text() == (
        "recipe: trainer.accumulate_grad_batches 1 -> 2; effective_batch (via recipe): 20 -> 40 s;"
        " update_budget (via recipe): max_audio_seconds 48000 -> 96000"
    )
    # the same budget change without a recipe change (other code computed it) is a cause
    c = copy.deepcopy(b)
    c["recipe_settings"] = a["recipe_settings"]
    c["hashes"]["bpe_model"] = sha("z")
    changes = what_changed(a, c)
    assert changes.causes == ("tokenizer", "effective_batch", "update_budget")
    assert changes.confounded
    # a budget key only one summary has (written by older code) is not compared
    d = copy.deepcopy(a)
    d["update_budget"]["batches_per_device"] = 2400
    assert what_changed(a, d).changes == ()


def test_missing_parts_compare_nothing_and_the_recipe_hash_stands_in_for_its_settings():
    a = summary()
    failed = {"run": "f", "status": "failed", "hashes": {"recipe": sha("q")}}
    changes = what_changed(a, failed)
    assert changes.text() == "recipe: rrrrrrrr -> qqqqqqqq"
    assert what_changed(a, {"run": "x"}).changes == ()


def test_long_lists_are_cut_in_the_text():
    a = summary()
    b = copy.deepcopy(a)
    for i in range(9):
        b["recipe_settings"]["model"][f"k{i}"] = i
    text = what_changed(a, b).text()
    assert text.startswith("recipe: model.k0 (unset) -> 0, model.k1 (unset) -> 1")
    assert text.endswith("+3 more")


def test_split_label():
    assert split_label(DEMO) == "demo.train"
    assert split_label("results/data/held/filtered/dev.jsonl.gz") == "held.dev"
    assert split_label("elsewhere/x.jsonl.gz") == "elsewhere/x.jsonl.gz"


def test_baseline_is_the_named_run_or_the_first():
    assert baseline_of(["a", "b"], None) == "a"
    assert baseline_of(["a", "b"], "b") == "b"
    assert baseline_of([], None) is None
    with pytest.raises(AsrflowError, match=r"report\.baseline_run: .*'c'"):
        baseline_of(["a", "b"], "c")


def test_change_columns_per_run():
    a = summary()
    b = with_recipe(a, "optim", "lr", 0.0015)
    cols = change_columns({"a": a, "b": b}, {}, "a")
    assert cols["a"] == {"baseline_run": "a", "changed_vs_baseline": None, "confounded": False}
    assert cols["b"] == {
        "baseline_run": "a",
        "changed_vs_baseline": "recipe: optim.lr 0.002 -> 0.0015",
        "confounded": False,
    }
    assert change_columns({"a": a}, {}, None) == {}


def test_categories_are_the_issues_list():
    assert CATEGORIES == (
        "data", "tokenizer", "recipe", "start_weights", "effective_batch", "update_budget",
        "code", "packages",
    )  # fmt: skip


def test_changed_values_and_the_stale_work_dir_message_share_one_diff():
    old = {"optim": {"lr": 0.002}, "model": {"encoder": "conformer"}}
    new = {"optim": {"lr": 0.0015}, "model": {"encoder": "conformer", "layers": 4}}
    assert changed_values(old, new) == [
        ("model.layers", "(unset)", 4),
        ("optim.lr", 0.002, 0.0015),
    ]
    assert changed_keys(old, new) == ["model.layers: '(unset)' -> 4", "optim.lr: 0.002 -> 0.0015"]

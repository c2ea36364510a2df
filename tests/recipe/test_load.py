"""Recipes: parsing, overrides, round trips, checks, budgets, and the shipped recipes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from asrflow.errors import AsrflowError
from asrflow.recipe.batching import Batching
from asrflow.recipe.checks import (
    ESPNET_CHOICES,
    ESPNET_SUPERSEDED_KEYS,
    check_overrides,
    check_recipe,
    recipe_from_dict,
)
from asrflow.recipe.load import effective_batch_seconds, load_recipe, scaled_lr, update_budget
from asrflow.recipe.mappings import deep_merge, dotted_overrides
from asrflow.recipe.sections import Criterion, LossConfig, SchedulerConfig, TrainerConfig
from asrflow.train.loop.trainer import trainer_kwargs
from tests.train.tiny_espnet import build_asr_model, num_parameters

RECIPES = Path(__file__).parents[2] / "config" / "recipes"
MODEL = {
    "encoder": "conformer",
    "encoder_conf": {"output_size": 16, "num_blocks": 2},
    "model_conf": {"ctc_weight": 1.0},
}


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_defaults_and_espnet_keys_pass_through(tmp_path):
    r = load_recipe(write(tmp_path, {**MODEL, "frontend": "default", "some_new_espnet_key": 3}))
    assert r.model == {**MODEL, "frontend": "default", "some_new_espnet_key": 3}
    assert r.trainer == TrainerConfig()
    assert r.scheduler.warmup == 0.02
    assert r.criteria == (Criterion("valid/loss", 3, "min"), Criterion("valid/wer", 2, "min"))
    assert r.optim.betas == (0.9, 0.98)


def test_overrides_deep_merge(tmp_path):
    path = write(tmp_path, {**MODEL, "trainer": {"max_steps": 100, "seed": 3}})
    r = load_recipe(
        path,
        {"trainer": {"max_steps": 10, "val_check_interval": 5}, "encoder_conf": {"num_blocks": 1}},
    )
    assert r.trainer.max_steps == 10
    assert r.trainer.seed == 3  # untouched siblings survive
    assert r.model["encoder_conf"] == {"output_size": 16, "num_blocks": 1}
    # a short override run validates once, at its end
    assert load_recipe(path, {"trainer": {"max_steps": 10}}).trainer.val_check_interval == 250
    assert (
        trainer_kwargs(load_recipe(path, {"trainer": {"max_steps": 10}}))["val_check_interval"]
        == 10
    )


def test_round_trip_and_sha256(tmp_path):
    r = load_recipe(RECIPES / "a100_conformer.yaml")
    assert recipe_from_dict(r.to_dict()) == r
    assert yaml.safe_load(yaml.safe_dump(r.to_dict())) == r.to_dict()
    assert recipe_from_dict(r.to_dict()).sha256() == r.sha256()
    assert hash(r) == hash(recipe_from_dict(r.to_dict()))
    changed = recipe_from_dict(deep_merge(r.to_dict(), {"encoder_conf": {"num_blocks": 11}}))
    assert changed.sha256() != r.sha256()
    # the model dict is a copy: mutating the input does not change the recipe
    source = {**MODEL, "encoder_conf": {"num_blocks": 2}}
    r2 = recipe_from_dict(source)
    source["encoder_conf"]["num_blocks"] = 5
    assert r2.model["encoder_conf"]["num_blocks"] == 2


def test_batching_section_is_the_samplers_settings(tmp_path):
    r = recipe_from_dict(MODEL)
    b = r.batching
    assert b == Batching()
    assert (b.max_duration, b.buffer_size, b.num_workers, b.drop_last) == (60.0, 10000, 1, False)
    # drop_last came later: at its default it stays out of the recipe's data, so no existing
    # recipe's hash (its runs' identity and params) changed
    assert "drop_last" not in r.to_dict()["batching"]
    dropping = load_recipe(write(tmp_path, {**MODEL, "batching": {"drop_last": True}}))
    assert dropping.batching.drop_last is True
    assert dropping.to_dict()["batching"]["drop_last"] is True
    assert recipe_from_dict(dropping.to_dict()) == dropping
    assert dropping.identity_sha256() != r.identity_sha256()


def test_the_optimizer_implementation_stays_out_of_existing_recipes_hashes(tmp_path):
    """optim.implementation came later: at its default (auto) it is not in the recipe's data,
    so no existing run's hash changed; set, it is a setting like any other."""
    r = recipe_from_dict(MODEL)
    assert r.optim.implementation == "auto"
    assert "implementation" not in r.to_dict()["optim"]
    loop = load_recipe(write(tmp_path, {**MODEL, "optim": {"implementation": "for_loop"}}))
    assert loop.to_dict()["optim"]["implementation"] == "for_loop"
    assert recipe_from_dict(loop.to_dict()) == loop
    assert loop.identity_sha256() != r.identity_sha256()


def test_the_workers_priority_is_operational(tmp_path):
    """batching.worker_nice only decides when the workers get a core: not part of the recipe's
    identity (changing it resumes a run, reruns nothing), and not a sampler argument."""
    r = recipe_from_dict(MODEL)
    assert r.batching.worker_nice == 19  # the lowest: load in the trainer's idle time
    assert "worker_nice" not in r.batching.sampler_kwargs()
    eager = load_recipe(write(tmp_path, {**MODEL, "batching": {"worker_nice": 0}}))
    assert eager.batching.worker_nice == 0
    assert eager.identity_sha256() == r.identity_sha256()
    assert eager.operational()["batching"] == {"num_workers": 1, "worker_nice": 0}


def test_on_a_sharded_run_the_loader_workers_are_a_setting(tmp_path):
    """On shards each loader worker batches its own share of them
    (asrflow.train.batches.shard_stream), so
    their number changes the batches: part of a sharded run's recipe identity and hash, not of
    its operational settings; on per-file corpora it stays operational. Either way the two
    halves hold every setting once."""
    one = recipe_from_dict({**MODEL, "batching": {"num_workers": 1}})
    two = recipe_from_dict({**MODEL, "batching": {"num_workers": 2}})
    assert one.identity_sha256() == two.identity_sha256()
    assert one.identity_sha256(sharded=True) != two.identity_sha256(sharded=True)
    assert one.identity(sharded=True)["batching"]["num_workers"] == 1
    assert "num_workers" not in one.identity()["batching"]
    assert one.operational(sharded=True)["batching"] == {"worker_nice": 19}
    assert one.operational(sharded=True)["diagnostics"] == one.operational()["diagnostics"]
    for sharded in (False, True):
        whole = deep_merge(one.identity(sharded=sharded), one.operational(sharded=sharded))
        assert recipe_from_dict(whole) == one


@pytest.mark.parametrize("sharded", [False, True])
def test_the_train_rules_params_follow_whether_the_run_reads_shards(monkeypatch, sharded):
    """What rule train (and the batch audit) is given: on a sharded corpus a change of
    batching.num_workers reruns them (its settings changed), on a per-file one it does not."""
    from asrflow import runs
    from asrflow.recipe.load import AUDIT_SECTIONS
    from asrflow.settings import with_defaults
    from tests.e2e import REPO

    monkeypatch.chdir(REPO)  # the recipe is read from config/recipes/
    corpus = {"source": "synthetic", **({"shards": {"shard_size": 50}} if sharded else {})}
    run = {"corpora": ["c"], "tokenizer": "t", "recipe": "demo_conformer"}
    config = with_defaults(
        {
            "corpora": {"c": corpus},
            "runs": {"r": run, "w": {**run, "overrides": {"batching": {"num_workers": 2}}}},
        }
    )
    assert runs.trains_from_shards(config, "r") is sharded
    for sections in (None, AUDIT_SECTIONS):
        r, w = (runs.recipe_params(config, n, sections=sections) for n in ("r", "w"))
        assert (r["settings"] != w["settings"]) is sharded
        assert (r["operational"] != w["operational"]) is not sharded
        assert r["operational"]["batching"]["worker_nice"] == 19


def test_yaml_int_precision_and_float_fields(tmp_path):
    r = load_recipe(
        write(
            tmp_path,
            {
                **MODEL,
                "trainer": {"precision": 32},
                "optim": {"lr": 1},
                "batching": {"max_duration": 30},
            },
        )
    )
    assert r.trainer.precision == "32"
    assert r.optim.lr == 1.0 and isinstance(r.optim.lr, float)
    assert r.batching.max_duration == 30.0


def test_speed_perturb_factors_parse_and_are_checked(tmp_path):
    r = load_recipe(write(tmp_path, {**MODEL, "augmentation": {"speed_perturb": [0.9, 1, 1.1]}}))
    assert r.augmentation.speed_perturb == (0.9, 1.0, 1.1)
    assert recipe_from_dict(r.to_dict()) == r
    assert recipe_from_dict(MODEL).augmentation.speed_perturb == ()  # off by default
    wrong_type = r"augmentation\.speed_perturb must be a list of numbers"
    with pytest.raises(AsrflowError, match=wrong_type):
        load_recipe(write(tmp_path, {**MODEL, "augmentation": {"speed_perturb": 0.9}}))
    for bad in ([0.9, 0.9], [0.3, 1.0]):
        with pytest.raises(AsrflowError, match=r"augmentation\.speed_perturb must be distinct"):
            load_recipe(write(tmp_path, {**MODEL, "augmentation": {"speed_perturb": bad}}))


def test_vtlp_factors_parse_and_are_checked(tmp_path):
    r = load_recipe(write(tmp_path, {**MODEL, "augmentation": {"vtlp": [0.9, 1.1]}}))
    assert r.augmentation.vtlp == (0.9, 1.1)
    assert recipe_from_dict(r.to_dict()) == r
    assert recipe_from_dict(MODEL).augmentation.vtlp == ()  # off by default
    for bad in ([1.1, 0.9], [0.9], [0.4, 1.0]):
        with pytest.raises(AsrflowError, match=r"augmentation\.vtlp must be \[low, high\]"):
            load_recipe(write(tmp_path, {**MODEL, "augmentation": {"vtlp": bad}}))


def test_noise_snr_parses_is_checked_and_stays_out_of_the_hash_when_off(tmp_path):
    r = load_recipe(write(tmp_path, {**MODEL, "augmentation": {"noise_snr": [10, 30]}}))
    assert r.augmentation.noise_snr == (10.0, 30.0)
    assert recipe_from_dict(r.to_dict()) == r
    assert r.identity()["augmentation"]["noise_snr"] == [10, 30]
    off = recipe_from_dict(MODEL)
    assert off.augmentation.noise_snr == ()
    # added after recipes were hashed: off, neither it nor vtlp is in the recipe's data, so no
    # existing run's hash (or training) changes
    assert set(off.to_dict()["augmentation"]) == {"speed_perturb"}
    for bad in ([30, 10], [10], [-20, 10], [10, 200]):
        with pytest.raises(AsrflowError, match=r"augmentation\.noise_snr must be \[low, high\]"):
            load_recipe(write(tmp_path, {**MODEL, "augmentation": {"noise_snr": bad}}))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"trainer": {"max_step": 10}}, r"unknown key\(s\) trainer\.max_step"),
        ({"optim": {"name": "adamw", "momentun": 0.9}}, r"optim\.momentun"),
        ({"trainer": {"max_steps": "10"}}, r"trainer\.max_steps must be an integer"),
        ({"trainer": {"max_steps": 10.0}}, r"trainer\.max_steps must be an integer"),
        ({"optim": {"betas": [0.9]}}, r"optim\.betas must be a list of 2 numbers"),
        ({"optim": "adam"}, r"optim: adam is ESPnet's syntax"),
        ({"optim": {"implementation": "fast"}}, r"optim\.implementation must be one of auto"),
        ({"best_model_criterion": [["valid", "loss", "min"]]}, r"\[monitor, top_k, mode\]"),
        ({"best_model_criterion": [["valid/acc", "max", 10]]}, r"ESPnet3's"),
        ({"batching": {"max_duration": 0}}, r"batching\.max_duration must be a positive"),
        ({"batching": {"num_buckets": 1}}, r"batching\.num_buckets must be an integer >= 2"),
        ({"batching": {"num_workers": -1}}, r"batching\.num_workers must be a non-negative"),
        ({"batching": {"drop_last": 1}}, r"batching\.drop_last must be true/false"),
        ({"batching": {"worker_nice": 20}}, r"batching\.worker_nice must be an integer from 0"),
        ({"batching": {"worker_nice": -5}}, r"batching\.worker_nice must be an integer from 0"),
    ],
)
def test_parse_errors_name_the_key(tmp_path, data, message):
    with pytest.raises(AsrflowError, match=message) as info:
        load_recipe(write(tmp_path, {**MODEL, **data}))
    assert "recipe.yaml" in str(info.value)  # the file is named


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"scheduler": SchedulerConfig(total_steps=3000)},
            r"scheduler\.total_steps \(3000\) != trainer\.max_steps \(2500\): the scheduler "
            r"would not reach its end",
        ),
        ({"scheduler": SchedulerConfig(warmup=2500)}, r"scheduler\.warmup \(2500 = 2500 steps\)"),
        ({"scheduler": SchedulerConfig(warmup=1.5)}, r"scheduler\.warmup \(1\.5\) is a float"),
        ({"scheduler": SchedulerConfig(name="noam")}, r"scheduler\.name"),
        ({"loss": LossConfig("frame")}, r"loss\.normalization must be one of token, utterance"),
        ({"criteria": (Criterion("valid/loss", 0, "min"),)}, r"top_k must be >= 1"),
        ({"criteria": (Criterion("valid/loss", 3, "lowest"),)}, r"mode must be min or max"),
        ({"criteria": (Criterion("valid/loss", 3, "min"),) * 2}, r"listed twice"),
        ({"criteria": ()}, r"best_model_criterion is empty"),
        ({"trainer": TrainerConfig(precision="bf16")}, r"trainer\.precision"),
        ({"trainer": TrainerConfig(accumulate_grad_batches=0)}, r"accumulate_grad_batches"),
    ],
)
def test_check_recipe_errors(change, message):
    r = replace(recipe_from_dict(MODEL), **change)
    with pytest.raises(AsrflowError, match=message):
        check_recipe(r)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"model_conf": {"ctc_weight": 1.0}}, r"encoder is missing"),
        ({**MODEL, "max_epoch": 70}, r"max_epoch is an ESPnet training key.*trainer\.max_steps"),
        ({**MODEL, "optim_conf": {"lr": 1}}, r"optim_conf .*use optim"),
        ({**MODEL, "token_list": ["a"]}, r"token_list"),
        ({**MODEL, "encoder_conf": 3}, r"encoder_conf must be a mapping"),
        ({"encoder": "conformer", "model_conf": {"ctc_weight": 0.3}}, r"no decoder is given"),
        ({"encoder": "conformer"}, r"ctc_weight is 0\.5"),  # ESPnet's default is hybrid
        (
            {**MODEL, "model_conf": {"ctc_weight": 1.0, "length_normalized_loss": True}},
            r"divided by the token count twice",
        ),
    ],
)
def test_check_recipe_model_section(model, message):
    with pytest.raises(AsrflowError, match=message):
        check_recipe(recipe_from_dict(model))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {**MODEL, "encoder": "conformerr"},
            r"encoder: ESPnet has no encoder named 'conformerr' \(did you mean conformer\?\); "
            r"its encoder names are conformer, transformer, .*, e_branchformer, ",
        ),
        (
            {**MODEL, "encoder": "Conformer"},
            r"no encoder named 'Conformer' \(did you mean conformer",
        ),
        (
            {**MODEL, "decoder": "transfromer"},
            r"decoder named 'transfromer' \(did you mean transformer",
        ),
        (
            {**MODEL, "frontend": "fbank"},
            r"no frontend named 'fbank'; its frontend names are default",
        ),
        ({**MODEL, "normalize": 3}, r"normalize must be the name of an ESPnet normalize, got 3"),
    ],
)
def test_an_unknown_espnet_component_is_named_with_the_valid_names(tmp_path, model, message):
    """Issue 30: `encoder: conformerr` passed every check and failed in the smoke run as ESPnet's
    ValueError, reported as a bug; now the recipe file, the key and ESPnet's names."""
    with pytest.raises(AsrflowError, match=message) as info:
        load_recipe(write(tmp_path, model))
    assert str(info.value).startswith(f"{tmp_path / 'recipe.yaml'}: ")
    # null is ESPnet's "none" where it allows one (decoder: null for CTC only): not ours to judge
    check_recipe(recipe_from_dict({**MODEL, "decoder": None, "specaug": None}))


def test_the_espnet_component_names_are_the_installed_espnets():
    """ESPNET_CHOICES is checked when the DAG is built, where ESPnet (torch) is not imported:
    it must list what the installed ESPnet's ASRTask accepts."""
    from asrflow.espnet_import import espnet_import

    with espnet_import():
        from espnet2.tasks.asr import ASRTask

    installed = {
        c.name: tuple(n for n in c.choices() if n is not None) for c in ASRTask.class_choices_list
    }
    assert installed == ESPNET_CHOICES


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"trainer": {"max_stepz": 10}},
            r"^run r: unknown key\(s\) runs\.r\.overrides\.trainer\.max_stepz; known keys of "
            r"trainer: max_steps",
        ),
        (
            {"trainer": {"max_steps": "ten"}},
            r"^run r: runs\.r\.overrides\.trainer\.max_steps must be an integer",
        ),
        ({"optim": {"lr": -1}}, r"^run r: runs\.r\.overrides\.optim\.lr must be > 0, got -1\.0$"),
        ({"optim": "adam"}, r"^run r: runs\.r\.overrides\.optim must be a mapping"),
        (
            {"batching": {"num_buckets": 1}},
            r"^run r: runs\.r\.overrides\.batching\.num_buckets must",
        ),
        (
            {"best_model_criterion": [["valid", "loss", "min"]]},
            r"runs\.r\.overrides\.best_model_criterion\[0\]",
        ),
        ({"encoder": "conformerr"}, r"^run r: runs\.r\.overrides\.encoder: ESPnet has no encoder"),
    ],
)
def test_an_override_error_names_the_override_not_the_recipe(tmp_path, overrides, message):
    """Issue 30: a typo in runs.<run>.overrides was reported as the recipe file's."""
    with pytest.raises(AsrflowError, match=message) as info:
        check_overrides(overrides, "r")
    assert "recipe.yaml" not in str(info.value)
    # ranges apply to what the overrides set, not to the sections' defaults they leave out
    check_overrides({"trainer": {"max_steps": 10}, "encoder_conf": {"num_blocks": 1}}, "r")


def test_the_unk_limit_is_an_operational_share():
    """diagnostics.max_unk_share (issue 30) only gates the smoke run: changing it, or adding
    the key, keeps every recipe's identity and hash (no run retrains)."""
    base = recipe_from_dict(MODEL)
    raised = recipe_from_dict({**MODEL, "diagnostics": {"max_unk_share": 0.05}})
    assert base.diagnostics.max_unk_share == 0.001 and raised.diagnostics.max_unk_share == 0.05
    assert base.identity() == raised.identity() and "max_unk_share" not in str(base.identity())
    assert raised.operational()["diagnostics"]["max_unk_share"] == 0.05
    for bad in (-0.1, 1.5):
        with pytest.raises(AsrflowError, match=r"diagnostics\.max_unk_share must be a share"):
            load_recipe({**MODEL, "diagnostics": {"max_unk_share": bad}})


def test_every_superseded_key_is_refused():
    for key in ESPNET_SUPERSEDED_KEYS:
        with pytest.raises(AsrflowError, match=key):
            check_recipe(recipe_from_dict({**MODEL, key: 1}))


def test_budget_and_lr_scaling():
    r = replace(
        recipe_from_dict(MODEL),
        trainer=TrainerConfig(max_steps=1000, devices=4, num_nodes=2, accumulate_grad_batches=3),
        batching=Batching(max_duration=100.0),
    )
    assert effective_batch_seconds(r) == 100.0 * 4 * 2 * 3
    assert update_budget(r) == {
        "optimizer_steps": 1000,
        "warmup_steps": 20,
        "batches_per_device": 3000,
        "effective_batch_seconds": 2400.0,
        "max_audio_seconds": 2_400_000.0,
        "peak_lr": 0.002,
    }
    assert scaled_lr(r) == 0.002
    scaled = replace(r, trainer=replace(r.trainer, scale_lr_with_devices=True))
    assert scaled_lr(scaled) == pytest.approx(0.002 * 8)


def test_trainer_kwargs_count_validation_in_batches():
    r = replace(
        recipe_from_dict(MODEL),
        trainer=TrainerConfig(
            max_steps=1000,
            val_check_interval=100,
            accumulate_grad_batches=4,
            precision="bf16-mixed",
        ),
    )
    kw = trainer_kwargs(r)
    assert kw["val_check_interval"] == 400  # Lightning counts batches, not updates
    assert kw["check_val_every_n_epoch"] is None
    assert kw["max_steps"] == 1000
    assert kw["precision"] == "bf16-mixed"
    assert trainer_kwargs(recipe_from_dict(MODEL))["precision"] in ("32-true", "bf16-mixed")
    short = replace(r, trainer=replace(r.trainer, max_steps=10))
    assert trainer_kwargs(short)["val_check_interval"] == 40  # once, at the end


@pytest.mark.parametrize("name", ["demo_conformer", "a100_conformer"])
def test_shipped_recipes_load_and_check(name):
    r = load_recipe(RECIPES / f"{name}.yaml")
    check_recipe(r)
    assert r.model["encoder"] == "conformer"
    assert r.loss.normalization == "token"
    warmup = update_budget(r)["warmup_steps"]
    assert warmup == round(r.scheduler.warmup * r.trainer.max_steps)
    assert 0.01 <= warmup / r.trainer.max_steps <= 0.05  # a short warmup, then cosine


def test_demo_recipe_builds_a_ctc_conformer(tmp_path, caplog):
    r = load_recipe(RECIPES / "demo_conformer.yaml")
    model = build_asr_model(r.model, tmp_path)
    assert model.decoder is None and model.ctc is not None
    assert len(model.encoder.encoders) == 2
    assert model.encoder.output_size() == 96
    n = num_parameters(model)
    assert 500_000 < n < 1_000_000, n  # ~0.72 M: small enough for ~0.2 s/step on 2 cores


def test_a100_recipe_builds_a_hybrid_conformer(tmp_path):
    r = load_recipe(RECIPES / "a100_conformer.yaml")
    model = build_asr_model(r.model, tmp_path)
    assert model.decoder is not None and model.ctc is not None
    assert model.ctc_weight == 0.3
    assert len(model.encoder.encoders) == 12 and len(model.decoder.decoders) == 6
    assert 25_000_000 < num_parameters(model) < 35_000_000


def test_dotted_overrides_nest_parse_and_merge() -> None:
    assert dotted_overrides(["batching.num_buckets=30", "batching.seed=1", "trainer.seed=2"]) == {
        "batching": {"num_buckets": 30, "seed": 1},
        "trainer": {"seed": 2},
    }
    assert dotted_overrides(["loss.normalization=token", "batching.shuffle=false"]) == {
        "loss": {"normalization": "token"},
        "batching": {"shuffle": False},
    }
    assert dotted_overrides(["trainer.seed=1", "trainer.seed=3"]) == {"trainer": {"seed": 3}}
    for bad in ["batching.num_buckets", "=3", "batching..seed=1"]:
        with pytest.raises(AsrflowError, match=r"expected section\.key=value"):
            dotted_overrides([bad])

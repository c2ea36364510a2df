"""asrflow.recipe.plan: a run's plan, its explicit keys, and the recipe it makes."""

from __future__ import annotations

import pytest

from asrflow.recipe.load import load_recipe, read_recipe_yaml
from asrflow.recipe.plan import (
    AUTO_BASE,
    apply_plan,
    explicit_keys,
    make_plan,
    overridden,
    plan_lines,
)
from tests.recipe.test_rules import corpus


def test_a_key_the_overrides_set_is_reported_and_never_taken_from_the_plan() -> None:
    plan = make_plan("r", corpus(), explicit=explicit_keys({"trainer": {"max_steps": 50}}))
    (steps,) = [c for c in plan["choices"] if c["key"] == "trainer.max_steps"]
    assert steps["overridden_by"] == "trainer.max_steps"
    assert "max_steps" not in plan["values"]["trainer"]
    assert any("overridden by runs.r.overrides.trainer.max_steps" in x for x in plan_lines(plan))


def test_overridden_matches_the_key_and_sections_above_it() -> None:
    assert overridden("specaug_conf", ["specaug_conf.num_time_mask"]) is None
    assert overridden("frontend_conf.fs", ["frontend_conf"]) == "frontend_conf"
    assert overridden("trainer.max_steps", ["trainer.max_step"]) is None


def test_a_key_inside_a_planned_mapping_replaces_only_that_key() -> None:
    explicit = explicit_keys({"specaug_conf": {"freq_mask_width_range": [0, 8]}})
    plan = make_plan("r", corpus(), explicit=explicit)
    base = {**read_recipe_yaml(AUTO_BASE), "specaug_conf": {"freq_mask_width_range": [0, 8]}}
    conf = apply_plan(base, plan, explicit)["specaug_conf"]
    assert conf["freq_mask_width_range"] == [0, 8]
    assert conf["num_time_mask"] == 2 and conf["apply_time_warp"] is False  # the plan's
    (row,) = [c for c in plan["choices"] if c["key"] == "specaug_conf"]
    assert row["overridden_inside"] == ["specaug_conf.freq_mask_width_range"]
    assert any("with specaug_conf.freq_mask_width_range from" in x for x in plan_lines(plan))


def test_the_base_with_the_plan_applied_is_a_valid_recipe_at_the_corpus_rate() -> None:
    plan = make_plan("r", corpus(hours=0.3))
    base = read_recipe_yaml(AUTO_BASE)
    explicit = explicit_keys({"trainer": {"seed": 3, "max_steps": 40}})
    trainer = {**base["trainer"], "seed": 3, "max_steps": 40}
    data = apply_plan({**base, "trainer": trainer}, plan, explicit)
    recipe = load_recipe(data)
    assert recipe.model["frontend_conf"]["fs"] == 8000
    assert recipe.model["specaug"] == "specaug"
    assert recipe.augmentation.speed_perturb == (0.9, 1.0, 1.1)
    assert (recipe.trainer.max_steps, recipe.trainer.seed) == (40, 3)  # the overrides win
    assert recipe.trainer.val_check_interval == plan["values"]["trainer"]["val_check_interval"]


def test_synthetic_speech_plans_no_augmentation_and_the_lines_say_so() -> None:
    plan = make_plan("demo", corpus(synthetic=True, rate=16000), recipe="demo_conformer")
    lines = plan_lines(plan)
    assert "not auto" in lines[0] and "synthetic speech" in lines[1]
    assert any(x.strip().startswith("specaug ") and "null" in x for x in lines)


def test_the_plan_file_holds_no_rules_version_so_a_bump_retrains_only_what_it_changes() -> None:
    """A bump reruns rule plan_run (its params); a plan whose values and reasons come out the
    same is the same file, whose mtime stays (asrflow.io), so its run does not retrain."""
    plan = make_plan("r", corpus())
    assert "rules_version" not in plan
    assert "rules version" in plan_lines(plan)[0]


def test_a_fine_tuning_plan_says_what_it_starts_from_and_takes_the_parents_lr(tmp_path) -> None:
    import json

    from asrflow.recipe.plan import parent_peak_lr

    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"recipe_settings": {"optim": {"lr": 0.005}}}))
    lineage = {"parent": "base", "generation": 0, "parent_lr": parent_peak_lr(summary)}
    plan = make_plan("child", corpus(hours=0.3), lineage=lineage)
    assert plan["lineage"] == lineage
    assert plan["values"]["optim"]["lr"] == pytest.approx(0.005 / 3, rel=3e-3)
    text = "\n".join(plan_lines(plan))
    assert "fine-tunes base (peak LR 0.005; trained from scratch)" in text
    assert "1/3 of base's peak 0.005" in text
    assert parent_peak_lr(None) is None
    assert "lineage" not in make_plan("r", corpus())  # a run from scratch: as before

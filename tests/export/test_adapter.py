"""The adapter-only export (asrflow.export.adapter): a LoRA run's difference from its start
weights, stored as low-rank factors where the change is low-rank, rebuilt from the base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from asrflow.errors import AsrflowError
from asrflow.export.adapter import (
    ADAPTER,
    DOWN,
    TOLERANCE,
    UP,
    apply_difference,
    difference,
    merge_adapter,
)
from asrflow.export.package import MODEL, verify_package
from asrflow.select.publish import publish_selected
from tests.export.test_package import _export
from tests.tiny_model import Trained, tiny_once


def _base(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "enc.linear_q.weight": torch.randn(48, 32, generator=g),
        "enc.linear_v.weight": torch.randn(48, 32, generator=g),
        "enc.norm.weight": torch.ones(32),
        "enc.bn.num_batches_tracked": torch.tensor(7),
        "ctc.weight": torch.randn(10, 32, generator=g),
    }


def _lora(weight: torch.Tensor, rank: int, seed: int, scale: float = 0.01) -> torch.Tensor:
    """``weight + B @ A`` (rank ``rank``) merged in float64 and stored as float32, as
    asrflow.checkpoints.merge_lora does."""
    g = torch.Generator().manual_seed(seed)
    b = torch.randn(weight.shape[0], rank, generator=g, dtype=torch.float64) * scale
    a = torch.randn(rank, weight.shape[1], generator=g, dtype=torch.float64)
    return (weight.double() + b @ a).float()


def _error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(
        float((a[k].double() - b[k].double()).abs().max()) / float(b[k].abs().max() or 1) for k in b
    )


def test_a_lora_change_is_stored_as_its_factors_and_frozen_tensors_not_at_all() -> None:
    base = _base()
    weights = dict(base)
    weights["enc.linear_q.weight"] = _lora(base["enc.linear_q.weight"], rank=2, seed=1)
    weights["enc.linear_v.weight"] = _lora(base["enc.linear_v.weight"], rank=2, seed=2)
    weights["enc.norm.weight"] = base["enc.norm.weight"] + 0.5  # trained, not adapted
    diff = difference(weights, base)
    assert set(diff) == {
        *(f"enc.linear_{p}.weight{s}" for p in "qv" for s in (UP, DOWN)),
        "enc.norm.weight",
    }
    assert diff["enc.linear_q.weight" + UP].shape == (48, 2)
    assert diff["enc.linear_q.weight" + DOWN].shape == (2, 32)
    rebuilt = apply_difference(base, diff, list(weights))
    assert list(rebuilt) == list(weights)
    assert _error(rebuilt, weights) < TOLERANCE
    assert torch.equal(rebuilt["ctc.weight"], base["ctc.weight"])


def test_an_average_of_k_lora_checkpoints_has_rank_at_most_k_times_r() -> None:
    base = _base()
    w = base["enc.linear_q.weight"]
    average = torch.stack([_lora(w, rank=2, seed=s) for s in (1, 2, 3)]).double().mean(0)
    weights = {**base, "enc.linear_q.weight": average.float()}
    diff = difference(weights, base)
    assert diff["enc.linear_q.weight" + UP].shape[1] == 6
    assert _error(apply_difference(base, diff, list(weights)), weights) < TOLERANCE


def test_a_full_rank_change_a_new_key_and_a_new_shape_are_stored_whole() -> None:
    base = _base()
    g = torch.Generator().manual_seed(5)
    weights = {
        **base,
        "enc.linear_q.weight": base["enc.linear_q.weight"] + torch.randn(48, 32, generator=g),
        "ctc.weight": torch.randn(12, 32, generator=g),  # a new vocabulary: another shape
        "decoder.embed": torch.randn(12, 8, generator=g),  # the base has none
    }
    diff = difference(weights, base)
    assert set(diff) == {"enc.linear_q.weight", "ctc.weight", "decoder.embed"}
    assert _error(apply_difference(base, diff, list(weights)), weights) == 0.0


def test_a_change_within_float32_rounding_is_no_change() -> None:
    base = _base()
    w = base["enc.linear_q.weight"]
    weights = {**base, "enc.linear_q.weight": torch.nextafter(w, w + 1)}  # one ulp everywhere
    assert difference(weights, base) == {}


def test_a_base_that_lacks_a_kept_key_is_named() -> None:
    base = _base()
    diff = difference(base, base)
    del base["ctc.weight"]
    with pytest.raises(AsrflowError, match=r"'ctc\.weight'.*not the model this adapter"):
        apply_difference(base, diff, ["ctc.weight"])


# --- the export: package.json's record, the rebuild from the base, publishing -----------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return tiny_once(tmp_path_factory)


@pytest.fixture
def adapted(trained: Trained, tmp_path: Path) -> tuple[Path, Path, dict]:
    """The tiny model as a base, and a package of it with two linear layers LoRA-adapted."""
    base_state = {k: v.clone() for k, v in trained.model.state_dict().items()}
    base = tmp_path / "base.pth"
    torch.save(base_state, base)
    linears = [k for k, v in base_state.items() if k.endswith(".weight") and v.ndim == 2]
    weights = dict(base_state)
    for seed, key in enumerate(linears[:2]):
        weights[key] = _lora(base_state[key], rank=2, seed=seed)
    source = tmp_path / "adapted.pth"
    torch.save(weights, source)
    manifest = _export(trained, tmp_path / "pkg", source, base_model=base)
    return tmp_path / "pkg", base, manifest


def test_the_package_holds_the_merged_model_and_the_adapter_with_the_bases_hash(adapted) -> None:
    package, base, manifest = adapted
    record = manifest["adapter"]
    assert record["file"] == ADAPTER and (package / ADAPTER).is_file()
    assert record["low_rank_tensors"] == 2 and record["whole_tensors"] == 0
    assert record["bytes"] < (package / MODEL).stat().st_size / 3
    assert record["max_abs_error"] < TOLERANCE
    assert verify_package(package)["adapter"] == record
    merged = torch.load(package / MODEL, weights_only=True)
    assert _error(merge_adapter(package, base), merged) < TOLERANCE
    (package / ADAPTER).write_bytes((package / ADAPTER).read_bytes() + b"x")
    with pytest.raises(AsrflowError, match=r"adapter\.pth: its SHA-256 differs"):
        verify_package(package)


def test_merging_onto_another_base_is_refused_naming_both_hashes(adapted, tmp_path) -> None:
    package, base, manifest = adapted
    other = tmp_path / "other.pth"
    state = torch.load(base, weights_only=True)
    torch.save({k: v + 1 if v.is_floating_point() else v for k, v in state.items()}, other)
    with pytest.raises(AsrflowError, match=manifest["adapter"]["base_model_sha256"][:12]):
        merge_adapter(package, other)


def test_publishing_copies_the_adapter_and_drops_one_a_former_selection_left(
    adapted, trained, tmp_path
) -> None:
    package, _, _ = adapted
    selected = tmp_path / "selected.json"
    selected.write_text(json.dumps({"selected": "pkg"}))
    out = tmp_path / "published"
    out.mkdir()
    publish_selected(selected, [package], out)
    assert (out / ADAPTER).read_bytes() == (package / ADAPTER).read_bytes()
    verify_package(out)
    plain = tmp_path / "plain" / "pkg"
    _export(trained, plain)
    publish_selected(selected, [plain], out)
    assert not (out / ADAPTER).exists()
    assert "adapter" not in verify_package(out)

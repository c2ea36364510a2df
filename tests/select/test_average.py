import hashlib
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrflow.artifacts import average_name
from asrflow.checkpoints import load_model_state
from asrflow.errors import AsrflowError, ValidationFailed
from asrflow.select.average import (
    RULE,
    average_checkpoints,
    average_state_dicts,
    topk_checkpoints,
)
from tests.test_checkpoints import lightning_checkpoint

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def naive_espnet_average(states):
    """ESPnet2/ESPnet3's rule: sum in the tensor's own dtype; ints summed, the rest divided."""
    avg = dict(states[0])
    for s in states[1:]:
        avg = {k: avg[k] + s[k] for k in avg}
    return {
        k: v if str(v.dtype).startswith("torch.int") else v / len(states) for k, v in avg.items()
    }


def assert_same(a, b):
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert a[key].shape == b[key].shape, key
        assert torch.equal(a[key], b[key]), key


# --- hypothesis strategies -------------------------------------------------------------------

shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)
any32 = st.floats(width=32, allow_nan=False)
finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def float_tensors(draw, dtype, elements=any32):
    shape = draw(shapes)
    n = math.prod(shape)
    values = draw(st.lists(elements, min_size=n, max_size=n))
    return torch.tensor(values, dtype=torch.float32).reshape(shape).to(dtype)


@st.composite
def state_dicts(draw):
    state = {}
    for i, dtype in enumerate(FLOAT_DTYPES):
        state[f"layer{i}.weight"] = draw(float_tensors(dtype))
    state["bn.num_batches_tracked"] = torch.tensor(draw(st.integers(0, 2**40)))
    shape = draw(shapes)
    n = math.prod(shape)
    ints = draw(st.lists(st.integers(-(2**31), 2**31), min_size=n, max_size=n))
    state["index"] = torch.tensor(ints, dtype=torch.int64).reshape(shape)
    bools = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    state["mask"] = torch.tensor(bools, dtype=torch.bool).reshape(shape)
    state["mask_u8"] = state["mask"].to(torch.uint8)
    return state


# --- the averaging rule ----------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(state=state_dicts(), k=st.integers(1, 8))
def test_average_of_k_copies_is_the_state_itself(state, k):
    copies = [{key: t.clone() for key, t in state.items()} for _ in range(k)]
    out = average_state_dicts(copies, [f"c{i}.ckpt" for i in range(k)])
    assert_same(out, state)
    assert all(out[key].data_ptr() != state[key].data_ptr() for key in state if state[key].numel())


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_average_of_two_fp32_dicts_is_the_elementwise_mean(data):
    a = data.draw(float_tensors(torch.float32, finite32))
    b = data.draw(st.lists(finite32, min_size=a.numel(), max_size=a.numel()))
    b = torch.tensor(b, dtype=torch.float32).reshape(a.shape)
    out = average_state_dicts([{"w": a}, {"w": b}], ["a", "b"])["w"]
    assert out.dtype == torch.float32
    mean = (a.double() + b.double()) / 2
    assert torch.equal(out, mean.float())
    # Only the final rounding to fp32 separates the result from the mean.
    assert torch.all((out.double() - mean).abs() <= mean.abs() * 2**-24 + 2**-150)


@settings(max_examples=60, deadline=None)
@given(
    mean=st.integers(-128, 128),
    spreads=st.lists(st.integers(0, 128), min_size=1, max_size=6),
)
def test_bf16_average_is_exact_when_the_mean_is_representable(mean, spreads):
    # Integers up to 256 in magnitude are exact in bf16 (8 significant bits); the values come in
    # pairs mean +- d, so the true mean is ``mean`` exactly.
    values = [v for d in spreads for v in (mean + d, mean - d)]
    states = [{"w": torch.tensor([float(v)], dtype=torch.bfloat16)} for v in values]
    out = average_state_dicts(states, [str(i) for i in range(len(states))])["w"]
    assert out.dtype == torch.bfloat16
    assert out.item() == mean


def test_bf16_naive_accumulation_loses_the_mean_ours_keeps_it():
    # Near 256 bf16 has a spacing of 2, near 512 a spacing of 4: the running sum 256 + 258 = 514
    # rounds to 512, then 512 + 258 = 770 rounds to 768, and 768 / 3 = 256.
    values = [256.0, 258.0, 258.0]
    states = [{"w": torch.tensor([v], dtype=torch.bfloat16)} for v in values]
    true_mean = torch.tensor([sum(values) / 3], dtype=torch.float64)  # 257.33
    rounded = true_mean.to(torch.bfloat16)
    assert rounded.item() == 258.0
    naive = naive_espnet_average(states)["w"]
    ours = average_state_dicts(states, ["a", "b", "c"])["w"]
    assert naive.item() == 256.0
    assert not torch.equal(naive, rounded)
    assert torch.equal(ours, rounded)


def test_fp16_three_30000s_average_to_30000_not_inf():
    states = [{"w": torch.tensor([30000.0], dtype=torch.float16)} for _ in range(3)]
    assert torch.isinf(naive_espnet_average(states)["w"]).all()
    out = average_state_dicts(states, ["a", "b", "c"])["w"]
    assert out.dtype == torch.float16
    assert out.item() == 30000.0


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_integer_counter_takes_the_largest_value_not_the_sum(order):
    counts = [torch.tensor(696), torch.tensor(1371)]
    states = [{"bn.num_batches_tracked": counts[i]} for i in order]
    assert naive_espnet_average(states)["bn.num_batches_tracked"].item() == 2067
    out = average_state_dicts(states, ["a", "b"])["bn.num_batches_tracked"]
    assert out.dtype == torch.int64
    assert out.shape == ()
    assert out.item() == 1371


def test_bool_mask_is_kept_bool_and_equal():
    mask = torch.tensor([True, False, True])
    states = [{"mask": mask.clone()} for _ in range(3)]
    assert naive_espnet_average(states)["mask"].dtype == torch.float32  # ESPnet: 0.333
    out = average_state_dicts(states, ["a", "b", "c"])["mask"]
    assert out.dtype == torch.bool
    assert torch.equal(out, mask)


@pytest.mark.parametrize(
    "key,a,b",
    [
        ("mask", torch.tensor([True, False]), torch.tensor([True, True])),
        (
            "mask_u8",
            torch.tensor([1, 0], dtype=torch.uint8),
            torch.tensor([0, 0], dtype=torch.uint8),
        ),
        ("index", torch.tensor([0, 1, 2]), torch.tensor([0, 2, 1])),
    ],
)
def test_differing_masks_and_index_tensors_are_an_error(key, a, b):
    with pytest.raises(ValidationFailed, match=rf"'{key}'.*first\.ckpt and second\.ckpt"):
        average_state_dicts([{key: a}, {key: b}], ["first.ckpt", "second.ckpt"])


# --- layout checks ---------------------------------------------------------------------------


def test_missing_key_names_the_key_and_the_file_lacking_it():
    a = {"w": torch.zeros(2), "b": torch.zeros(1)}
    b = {"w": torch.zeros(2)}
    with pytest.raises(ValidationFailed, match=r"two\.ckpt lacks key 'b', which one\.ckpt has"):
        average_state_dicts([a, b], ["one.ckpt", "two.ckpt"])


def test_extra_key_names_the_key_and_the_file_having_it():
    a = {"w": torch.zeros(2)}
    b = {"w": torch.zeros(2), "extra": torch.zeros(1)}
    with pytest.raises(ValidationFailed, match=r"two\.ckpt has key 'extra', which one\.ckpt lacks"):
        average_state_dicts([a, b], ["one.ckpt", "two.ckpt"])


def test_shape_mismatch_names_key_shapes_and_files():
    a = {"w": torch.zeros(2, 3)}
    b = {"w": torch.zeros(3, 2)}
    with pytest.raises(
        ValidationFailed, match=r"'w': shape \(2, 3\) in one\.ckpt but \(3, 2\) in two\.ckpt"
    ):
        average_state_dicts([a, b], ["one.ckpt", "two.ckpt"])


def test_dtype_mismatch_names_key_dtypes_and_files():
    a = {"w": torch.zeros(2)}
    b = {"w": torch.zeros(2, dtype=torch.bfloat16)}
    with pytest.raises(ValidationFailed, match=r"'w'.*float32 in one\.ckpt.*bfloat16 in two\.ckpt"):
        average_state_dicts([a, b], ["one.ckpt", "two.ckpt"])


def test_nothing_to_average_is_an_error():
    with pytest.raises(AsrflowError):
        average_state_dicts([], [])


# --- choosing and naming ---------------------------------------------------------------------


SUMMARY = {
    "run": "demo",
    "status": "completed",
    "criteria": {
        "valid/loss": {
            "top_k": {
                "valid.loss.step0001200.ckpt": 31.5,
                "valid.loss.step0000400.ckpt": 40.0,
                "valid.loss.step0000800.ckpt": 29.25,
            },
            "mode": "min",
            "best_model_path": "valid.loss.step0000800.ckpt",
        },
        "valid/acc": {
            "top_k": {"valid.acc.step0000400.ckpt": 0.5, "valid.acc.step0001200.ckpt": 0.75},
            "mode": "max",
            "best_model_path": "valid.acc.step0001200.ckpt",
        },
    },
}


def test_topk_checkpoints_best_first_by_mode():
    assert topk_checkpoints(SUMMARY, "valid/loss") == [
        ("valid.loss.step0000800.ckpt", 29.25),
        ("valid.loss.step0001200.ckpt", 31.5),
        ("valid.loss.step0000400.ckpt", 40.0),
    ]
    assert topk_checkpoints(SUMMARY, "valid/acc") == [
        ("valid.acc.step0001200.ckpt", 0.75),
        ("valid.acc.step0000400.ckpt", 0.5),
    ]
    best = SUMMARY["criteria"]["valid/loss"]["best_model_path"]
    assert topk_checkpoints(SUMMARY, "valid/loss")[0][0] == best


def test_topk_checkpoints_unknown_monitor_or_failed_run():
    with pytest.raises(AsrflowError, match=r"'valid/wer'.*\['valid/acc', 'valid/loss'\]"):
        topk_checkpoints(SUMMARY, "valid/wer")
    with pytest.raises(AsrflowError, match="'failed'"):
        topk_checkpoints({"run": "x", "status": "failed"}, "valid/loss")


# --- the whole step --------------------------------------------------------------------------


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_average_checkpoints_round_trip(tmp_path):
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    layouts = {
        "valid.loss.step0000400.ckpt": (1.0, 400, 40.0),
        "valid.loss.step0000800.ckpt": (2.0, 800, 29.25),
        "valid.loss.step0001200.ckpt": (4.5, 1200, 31.5),
    }
    mask = torch.tensor([True, False, True])
    for name, (value, step, _) in layouts.items():
        state = {
            "encoder.w": torch.full((2, 3), value),
            "encoder.h": torch.full((2,), value, dtype=torch.bfloat16),
            "encoder.bn.num_batches_tracked": torch.tensor(step),
            "encoder.mask": mask,
        }
        torch.save(lightning_checkpoint(state, step), ckpts / name)
    torch.save(lightning_checkpoint(state, 1200), ckpts / "last.ckpt")

    best = topk_checkpoints(SUMMARY, "valid/loss")
    out = tmp_path / "avg" / f"{average_name('valid/loss', 3)}.pth"
    record = average_checkpoints(
        [ckpts / n for n, _ in best],
        out,
        monitor="valid/loss",
        k=3,
        scores=[s for _, s in best],
    )
    assert record["monitor"] == "valid/loss" and record["k"] == 3 and record["rule"] == RULE
    assert [i["path"] for i in record["inputs"]] == [str(ckpts / n) for n, _ in best]
    assert [i["score"] for i in record["inputs"]] == [29.25, 31.5, 40.0]
    assert [i["sha256"] for i in record["inputs"]] == [_sha256(ckpts / n) for n, _ in best]
    assert record["output"] == str(out) and record["output_sha256"] == _sha256(out)
    assert list(out.parent.iterdir()) == [out]  # no temporary file left

    avg = torch.load(out, map_location="cpu", weights_only=True)
    assert set(avg) == {"encoder.w", "encoder.h", "encoder.bn.num_batches_tracked", "encoder.mask"}
    assert torch.equal(avg["encoder.w"], torch.full((2, 3), 2.5))
    assert avg["encoder.h"].dtype == torch.bfloat16
    assert torch.equal(avg["encoder.h"], torch.full((2,), 2.5, dtype=torch.bfloat16))
    assert avg["encoder.bn.num_batches_tracked"].item() == 1200
    assert torch.equal(avg["encoder.mask"], mask)
    assert_same(load_model_state(out), avg)  # a plain state dict reads back as is

    # Byte-reproducible: a rerun writes the same bytes and leaves the file untouched.
    mtime = out.stat().st_mtime_ns
    again = average_checkpoints([ckpts / n for n, _ in best], out, monitor="valid/loss", k=3)
    assert again["output_sha256"] == record["output_sha256"]
    assert "score" not in again["inputs"][0]
    assert out.stat().st_mtime_ns == mtime


def test_average_checkpoints_loads_into_the_model(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    paths = []
    for i in range(2):
        torch.nn.init.normal_(model[0].weight)
        model[1].num_batches_tracked += 10 * (i + 1)
        paths.append(tmp_path / f"s{i}.ckpt")
        torch.save(lightning_checkpoint(model.state_dict()), paths[-1])
    average_checkpoints(paths, tmp_path / "avg.pth", monitor="valid/loss", k=2)
    fresh = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    fresh.load_state_dict(torch.load(tmp_path / "avg.pth", weights_only=True), strict=True)
    assert fresh[1].num_batches_tracked.item() == 30


def test_average_checkpoints_k_must_match_and_inputs_must_differ(tmp_path):
    torch.save({"w": torch.ones(1)}, tmp_path / "a.pth")
    torch.save({"w": torch.ones(1)}, tmp_path / "b.pth")
    with pytest.raises(AsrflowError, match=r"3 best.*2 were given"):
        average_checkpoints(
            [tmp_path / "a.pth", tmp_path / "b.pth"], tmp_path / "o.pth", monitor="m", k=3
        )
    with pytest.raises(AsrflowError, match="given twice"):
        average_checkpoints(
            [tmp_path / "a.pth", tmp_path / "a.pth"], tmp_path / "o.pth", monitor="m", k=2
        )
    assert not (tmp_path / "o.pth").exists()


def test_a_failed_average_leaves_no_output(tmp_path):
    torch.save({"w": torch.ones(1)}, tmp_path / "a.pth")
    torch.save({"w": torch.ones(2)}, tmp_path / "b.pth")
    with pytest.raises(ValidationFailed):
        average_checkpoints(
            [tmp_path / "a.pth", tmp_path / "b.pth"], tmp_path / "o.pth", monitor="m", k=2
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pth", "b.pth"]

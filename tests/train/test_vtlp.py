"""Vocal tract length perturbation of the features (asrflow.train.batches.vtlp)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asrflow.errors import AsrflowError
from asrflow.train.batches.vtlp import Vtlp, add_vtlp, source_positions, warp
from tests.train.tiny_espnet import TINY_CTC_MODEL, build_asr_model

NYQUIST = 4000.0


@pytest.mark.parametrize("alpha", [0.9, 0.95, 1.05, 1.1])
def test_the_warp_scales_low_frequencies_and_keeps_both_ends(alpha):
    f = np.linspace(0.0, NYQUIST, 801)
    w = warp(f, alpha, NYQUIST)
    assert w[0] == 0.0 and w[-1] == pytest.approx(NYQUIST)
    assert np.all(np.diff(w) > 0)  # monotonic: no two frequencies meet
    low = f < 0.7 * NYQUIST * min(alpha, 1.0) / alpha
    np.testing.assert_allclose(w[low], alpha * f[low])


def test_a_factor_of_one_reads_every_bin_itself():
    np.testing.assert_allclose(source_positions(1.0, 40, 8000), np.arange(40), atol=1e-6)


def test_a_longer_vocal_tract_moves_a_formant_down_and_a_shorter_one_up():
    feats = torch.zeros(1, 5, 40)
    feats[..., 20] = 10.0  # one "formant" at bin 20

    def peak(alpha: float) -> float:
        v = Vtlp(alpha, alpha, 40, 8000)
        out, _ = v(feats, torch.tensor([5]))
        return float((out[0, 0] * torch.arange(40)).sum() / out[0, 0].sum())

    assert peak(1.0) == pytest.approx(20.0)
    assert peak(1.1) > 20.5  # shorter tract: higher formants
    assert peak(0.9) < 19.5


def test_each_utterance_of_a_batch_draws_its_own_factor_and_lengths_pass_through():
    torch.manual_seed(0)
    feats = torch.randn(1, 30, 40).repeat(8, 1, 1)
    lengths = torch.full((8,), 30)
    out, out_lengths = Vtlp(0.9, 1.1, 40, 8000)(feats, lengths)
    assert out.shape == feats.shape and out_lengths is lengths
    distinct = {tuple(out[i, 0, :5].tolist()) for i in range(8)}
    assert len(distinct) == 8


def test_vtlp_runs_before_specaugment_in_training_only_and_adds_no_state(tmp_path):
    model = build_asr_model({**TINY_CTC_MODEL, "specaug": None}, tmp_path)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    add_vtlp(model, (0.9, 1.1))
    assert isinstance(model.specaug, Vtlp) and model.specaug.after is None
    assert model.specaug.n_mels == 20 and model.specaug.fs == 16000
    assert list(model.state_dict()) == list(before)  # a checkpoint of it loads anywhere
    speech, lengths = torch.randn(2, 8000), torch.tensor([8000, 6000])
    model.eval()
    with torch.no_grad():
        a, _ = model.encode(speech, lengths)
        b, _ = model.encode(speech, lengths)
    torch.testing.assert_close(a, b)  # eval: no warp
    model.train()
    calls = []
    model.specaug.register_forward_hook(lambda *_: calls.append(1))
    model.encode(speech, lengths)
    assert calls == [1]


def test_a_frontend_without_mel_filters_is_named(tmp_path):
    model = build_asr_model(TINY_CTC_MODEL, tmp_path)
    model.frontend = torch.nn.Identity()
    with pytest.raises(AsrflowError, match=r"augmentation\.vtlp.*frontend Identity"):
        add_vtlp(model, (0.9, 1.1))


def test_factors_out_of_range_are_refused():
    with pytest.raises(ValueError, match="VTLP factors"):
        Vtlp(1.2, 1.1, 40, 8000)

"""Long-form decoding: window plans tile the recording, stitching keeps each frame once, and a
long utterance goes through the windows (on the tiny trained model, and exactly on a model whose
frames depend on their own samples only)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from asrflow.errors import AsrflowError
from asrflow.evaluate.decode import Decoding, PackageModel, timed_transcribe
from asrflow.evaluate.longform import kept_frames, stitch, window_groups, window_plan
from tests.evaluate.test_decode import package, trained  # noqa: F401 (module fixtures)


@given(
    n=st.integers(1, 5000),
    window=st.integers(2, 800),
    overlap_share=st.floats(0, 0.9),
)
def test_kept_spans_tile_the_recording_and_windows_are_whole(n, window, overlap_share):
    overlap = int(window * overlap_share)
    plan = window_plan(n, window, overlap)
    assert plan[0].start == 0 and plan[-1].end == n
    assert plan[0].keep_start == 0 and plan[-1].keep_end == n
    for a, b in itertools.pairwise(plan):
        assert a.keep_end == b.keep_start  # no gap, no sample kept twice
        assert b.start <= a.keep_end <= a.end  # the join lies in the overlap
    for w in plan:
        assert w.start <= w.keep_start <= w.keep_end <= w.end
        assert w.length == min(window, n)


def test_bad_windows_are_refused():
    with pytest.raises(AsrflowError, match="window_seconds"):
        window_plan(100, 10, 10)
    with pytest.raises(AsrflowError, match="window_seconds"):
        window_plan(100, 0, 0)
    with pytest.raises(AsrflowError, match="window_overlap_seconds"):
        Decoding(window_seconds=10, window_overlap_seconds=12)


def _local_frames(audio: np.ndarray, hop: int) -> torch.Tensor:
    """A "model" whose frame j is a function of its own samples only: their sum, per hop."""
    n = len(audio) // hop
    return torch.from_numpy(audio[: n * hop].reshape(n, hop).sum(axis=1))


def test_stitching_a_frame_local_model_gives_the_whole_recordings_frames():
    hop = 40
    audio = np.random.default_rng(0).standard_normal(hop * 997).astype(np.float64)
    plan = window_plan(len(audio), window=hop * 100, overlap=hop * 30)
    outputs = [_local_frames(audio[w.start : w.end], hop) for w in plan]
    stitched = stitch(plan, outputs)
    assert torch.equal(stitched, _local_frames(audio, hop))


def test_kept_frames_take_the_frames_centred_in_the_kept_span():
    plan = window_plan(1000, 400, 100)
    assert [(w.start, w.keep_start, w.keep_end) for w in plan] == [
        (0, 0, 350),
        (300, 350, 650),
        (600, 650, 1000),
    ]
    # 40 frames of 10 samples over 300:700; centres 305, 315, ...: 350:650 keeps frames 5..34
    assert kept_frames(plan[1], 40) == slice(5, 35)
    assert kept_frames(plan[1], 0) == slice(0, 0)


def test_windows_are_encoded_in_groups_of_bounded_audio():
    plan = window_plan(10_000, 1000, 200)
    groups = list(window_groups(plan, 2500))
    assert len(plan) == 13 and [len(g) for g in groups] == [2] * 6 + [1]
    assert [w for g in groups for w in g] == plan
    assert [len(g) for g in window_groups(plan, 10)] == [1] * len(plan)  # one window at least


def test_only_utterances_longer_than_the_window_are_decoded_in_windows(package, trained):  # noqa: F811
    model = PackageModel(
        package,
        Decoding(device="cpu", dtype="float32", window_seconds=1.0, window_overlap_seconds=0.4),
    )
    calls: list[int] = []
    long_call = model.transcribe_long

    def spy(audio, batch_seconds):
        calls.append(len(audio))
        return long_call(audio, batch_seconds)

    model.transcribe_long = spy
    sr = model.sample_rate
    short = [a for a in trained.audio if len(a) <= sr]
    long = np.concatenate([trained.audio[2], np.zeros(sr // 2, np.float32), trained.audio[3]])
    hyps, _ = timed_transcribe(model, [*short, long], sr, 60)
    assert calls == [len(long)]
    whole = PackageModel(package, Decoding(device="cpu", dtype="float32", window_seconds=0))
    assert hyps[: len(short)] == whole.transcribe(short)  # short ones as before
    assert isinstance(hyps[-1], str)


def test_one_window_decodes_like_the_whole_utterance(package, trained):  # noqa: F811
    model = PackageModel(package, Decoding(device="cpu", dtype="float32", window_seconds=60))
    for audio in trained.audio:
        assert model.transcribe_long(audio, 60) == model.transcribe([audio])[0]

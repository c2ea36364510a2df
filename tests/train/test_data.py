"""Tests for asrflow.train.batches.loader: padded batches, resampling, resumable sampler,
DataLoader, mix."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from lhotse import CutSet

from asrflow.data.cuts import save_cuts
from asrflow.data.importers import import_nemo
from asrflow.errors import AsrflowError
from asrflow.recipe.batching import Batching
from asrflow.text import TextNormalization
from asrflow.tokenizer import TokenizerConfig, train_tokenizer
from asrflow.tokens import TokenEncoder
from asrflow.train.batches.loader import (
    AsrDataset,
    EpochMixSampler,
    add_noise,
    make_dataloader,
    make_sampler,
    mix_epoch,
    speed_perturb,
)
from tests.conftest import write_nemo, write_wav
from tests.cuts import audio_less_cut

NORM = TextNormalization()


@pytest.fixture
def corpus(tmp_path: Path, nemo_corpus) -> SimpleNamespace:
    """Train cuts with real audio (9 cuts, 1.0-1.5 s) and a char tokenizer trained on them."""
    manifests = nemo_corpus()
    cuts = CutSet.from_cuts(import_nemo(manifests["train"]))
    save_cuts(cuts, tmp_path / "train.jsonl.gz")
    model, tokens = tmp_path / "bpe.model", tmp_path / "tokens.txt"
    train_tokenizer(
        tmp_path / "train.jsonl.gz", model, tokens, TokenizerConfig(model_type="char"), NORM
    )
    return SimpleNamespace(cuts=cuts, encoder=TokenEncoder(model, tokens, NORM), root=tmp_path)


def fake_cuts(n: int, prefix: str = "c", seed: int = 0) -> CutSet:
    """Audio-less cuts of varied duration (for sampler tests, which never load audio)."""
    return CutSet.from_cuts(
        audio_less_cut(f"{prefix}{i:04d}", round(0.5 + ((i * 7919 + seed) % 23) * 0.2, 2))
        for i in range(n)
    )


def ids_of(batches) -> list[list[str]]:
    return [[c.id for c in b] for b in batches]


def test_batch_padding_lengths_and_counts(corpus):
    cuts = list(corpus.cuts)
    batch = AsrDataset(corpus.encoder)[CutSet.from_cuts(cuts)]
    n = len(cuts)
    assert batch["ids"] == [c.id for c in cuts]
    assert batch["speech"].dtype == torch.float32
    assert batch["speech_lengths"].dtype == torch.int64
    assert batch["text"].dtype == torch.int64 and batch["text_lengths"].dtype == torch.int64
    assert batch["speech_lengths"].tolist() == [c.num_samples for c in cuts]
    assert batch["speech"].shape == (n, max(c.num_samples for c in cuts))

    targets = [corpus.encoder.encode(c.supervisions[0].text) for c in cuts]
    assert batch["text_lengths"].tolist() == [len(t) for t in targets]
    assert batch["text"].shape == (n, max(len(t) for t in targets))
    for i, (t, s_len) in enumerate(zip(targets, batch["speech_lengths"].tolist(), strict=True)):
        assert batch["text"][i, : len(t)].tolist() == t
        assert (batch["text"][i, len(t) :] == -1).all()
        assert (batch["speech"][i, s_len:] == 0).all()
        assert batch["speech"][i, :s_len].abs().max() > 0
    assert batch["num_tokens"] == sum(len(t) for t in targets)
    assert batch["audio_seconds"] == pytest.approx(sum(c.duration for c in cuts))
    total = batch["speech"].numel()
    assert batch["padding_ratio"] == pytest.approx(1 - sum(c.num_samples for c in cuts) / total)
    assert corpus.encoder.decode(batch["text"][0].tolist()) == "hello a number zero"


def test_single_cut_batch_has_no_padding(corpus):
    batch = AsrDataset(corpus.encoder)[corpus.cuts.subset(first=1)]
    assert batch["padding_ratio"] == 0.0
    assert batch["speech"].shape[0] == 1


def snr_db(clean: torch.Tensor, noisy: torch.Tensor) -> float:
    return float(10 * torch.log10(clean.square().mean() / (noisy - clean).square().mean()))


def test_noise_is_added_at_an_snr_in_the_range_over_each_rows_own_samples():
    g = torch.Generator().manual_seed(0)
    t = torch.arange(16000) / 8000
    loud, quiet = torch.sin(2 * torch.pi * 440 * t), 0.01 * torch.sin(2 * torch.pi * 300 * t)
    speech = torch.zeros(3, 16000)
    speech[0], speech[1, :8000] = loud, quiet[:8000]  # row 2: silence
    lengths = torch.tensor([16000, 8000, 12000])
    noisy = add_noise(speech, lengths, (20.0, 20.0), generator=g)
    assert snr_db(speech[0], noisy[0]) == pytest.approx(20.0, abs=0.2)
    # the quiet row gets its own noise level, from its valid samples only (not the padding)
    assert snr_db(speech[1, :8000], noisy[1, :8000]) == pytest.approx(20.0, abs=0.3)
    assert (noisy[1, 8000:] == 0).all() and (noisy[2] == 0).all()  # padding, silence untouched

    snrs = [
        snr_db(loud, add_noise(loud[None], torch.tensor([16000]), (5.0, 35.0), g)[0])
        for _ in range(40)
    ]
    assert 5 - 0.3 < min(snrs) and max(snrs) < 35 + 0.3
    assert max(snrs) - min(snrs) > 15  # drawn per call, over the range


def test_train_dataset_adds_noise_and_the_default_dataset_does_not(corpus):
    cuts = corpus.cuts.subset(first=3)
    clean, again = AsrDataset(corpus.encoder)[cuts], AsrDataset(corpus.encoder)[cuts]
    assert torch.equal(clean["speech"], again["speech"])
    noisy = AsrDataset(corpus.encoder, noise_snr=(10.0, 10.0))[cuts]
    assert noisy["speech"].shape == clean["speech"].shape
    for i, n in enumerate(clean["speech_lengths"].tolist()):
        assert snr_db(clean["speech"][i, :n], noisy["speech"][i, :n]) == pytest.approx(10, abs=1)


def test_resamples_to_the_model_rate(corpus):
    root = corpus.root / "mixed"
    write_wav(root / "low.wav", 0.5, sr=8000)
    write_wav(root / "high.wav", 0.25, sr=16000, seed=3)
    manifest = write_nemo(
        root / "m.jsonl",
        [
            {"audio_filepath": "low.wav", "duration": 0.5, "text": "hello one"},
            {"audio_filepath": "high.wav", "duration": 0.25, "text": "hello two"},
        ],
    )
    cuts = CutSet.from_cuts(import_nemo(manifest))
    assert [c.sampling_rate for c in cuts] == [8000, 16000]

    up = AsrDataset(corpus.encoder, sample_rate=16000)[cuts]
    assert up["speech_lengths"].tolist() == [8000, 4000]
    assert up["speech"].shape == (2, 8000)
    assert up["speech"][0].abs().max() > 0

    down = AsrDataset(corpus.encoder, sample_rate=8000)[cuts]
    assert down["speech_lengths"].tolist() == [4000, 2000]


def test_speech_is_what_lhotse_collate_audio_makes(corpus):
    """collate_speech reads and pads the audio itself (faster): the same tensors as Lhotse's
    collate_audio(mono_downmix=True), for cuts of several lengths, one resampled, one part of
    a longer recording, one speed-perturbed, one channel of a stereo file and both of them."""
    import soundfile
    from lhotse import Recording
    from lhotse.dataset.collation import collate_audio

    from asrflow.train.batches.loader import collate_speech

    root = corpus.root / "collate"
    write_wav(root / "low.wav", 0.5, sr=8000)
    rng = np.random.default_rng(5)
    stereo = (rng.standard_normal((6000, 2)) * 3000).astype(np.int16)
    soundfile.write(root / "stereo.wav", stereo, 16000, subtype="PCM_16")
    manifest = write_nemo(
        root / "m.jsonl",
        [
            {"audio_filepath": "low.wav", "duration": 0.5, "text": "hello one"},
            {"audio_filepath": "stereo.wav", "duration": 0.375, "text": "hello two"},
        ],
    )
    extra = list(import_nemo(manifest))  # the stereo file's cut: its channel 0
    both = Recording.from_file(root / "stereo.wav").to_cut()  # both channels: downmixed
    assert both.num_channels == 2
    first, second = list(corpus.cuts)[:2]
    cuts = [
        *list(corpus.cuts)[2:5],
        extra[0].resample(16000),
        extra[1],
        both,
        first.truncate(offset=0.2, duration=0.5),
        second.perturb_speed(1.1),
    ]
    speech, lengths = collate_speech(cuts)
    expected, expected_lengths = collate_audio(CutSet.from_cuts(cuts), mono_downmix=True)
    assert speech.dtype == torch.float32 and lengths.dtype == torch.int64
    assert torch.equal(lengths, expected_lengths.to(torch.int64))
    assert lengths.tolist() == [c.num_samples for c in cuts]
    assert torch.equal(speech, expected.to(torch.float32))


def test_unknown_characters_become_unk(corpus):
    root = corpus.root / "unk"
    write_wav(root / "x.wav", 0.5)
    manifest = write_nemo(
        root / "m.jsonl", [{"audio_filepath": "x.wav", "duration": 0.5, "text": "Quiz, hello!"}]
    )
    batch = AsrDataset(corpus.encoder)[CutSet.from_cuts(import_nemo(manifest))]
    ids = batch["text"][0].tolist()
    assert corpus.encoder.unk_id in ids
    assert corpus.encoder.decode(ids).endswith(" hello")


def test_empty_transcript_names_the_manifest_line(corpus):
    root = corpus.root / "empty"
    write_wav(root / "a.wav", 0.5)
    write_wav(root / "b.wav", 0.5, seed=1)
    manifest = write_nemo(
        root / "m.jsonl",
        [
            {"audio_filepath": "a.wav", "duration": 0.5, "text": "hello"},
            {"audio_filepath": "b.wav", "duration": 0.5, "text": " ?! "},
        ],
    )
    cuts = CutSet.from_cuts(import_nemo(manifest))
    with pytest.raises(AsrflowError, match=re.escape(f"{manifest}:2: cut b has no tokens")):
        AsrDataset(corpus.encoder)[cuts]


def test_sampler_covers_every_cut_within_max_duration():
    cuts = fake_cuts(300)
    sampler = make_sampler(cuts, Batching(max_duration=12.0, num_buckets=4, seed=3))
    batches = list(sampler)
    assert sorted(c.id for b in batches for c in b) == sorted(cuts.ids)
    assert all(sum(c.duration for c in b) <= 12.0 + 1e-9 for b in batches)
    sampler.set_epoch(1)
    assert ids_of(sampler) != ids_of(batches)  # a new shuffle per epoch


@pytest.mark.parametrize("k", [1, 7])
def test_sampler_resumes_from_state_dict(k: int):
    cuts = fake_cuts(400)
    settings = Batching(max_duration=10.0, num_buckets=5, shuffle=True, seed=11, buffer_size=500)
    reference = make_sampler(cuts, settings)
    epoch0 = ids_of(reference)
    reference.set_epoch(1)
    epoch1 = ids_of(reference)

    interrupted = make_sampler(cuts, settings)
    it = iter(interrupted)
    seen = [[c.id for c in next(it)] for _ in range(k)]
    state = copy.deepcopy(interrupted.state_dict())  # load_state_dict consumes its argument

    restored = make_sampler(cuts, settings)
    restored.load_state_dict(state)
    rest = ids_of(restored)
    assert seen + rest == epoch0
    assert len(rest) == len(epoch0) - k
    restored.set_epoch(1)
    assert ids_of(restored) == epoch1


def test_batching_settings_are_checked_and_split_between_sampler_and_loader():
    b = Batching(max_duration=30, num_buckets=3, num_workers=4)
    assert "num_workers" not in b.sampler_kwargs()  # the DataLoader's, not the sampler's
    assert b.sampler_kwargs()["max_duration"] == 30
    with pytest.raises(AsrflowError, match="max_duration must be a positive"):
        Batching(max_duration=0)
    with pytest.raises(AsrflowError, match="num_buckets must be an integer >= 2"):
        Batching(max_duration=10, num_buckets=1)


def test_too_many_buckets_is_a_user_error():
    with pytest.raises(AsrflowError, match=r"lower batching\.num_buckets"):
        make_sampler(fake_cuts(3), Batching(max_duration=10, num_buckets=5))


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_yields_every_cut_once(corpus, workers: int):
    batching = Batching(max_duration=3.0, num_buckets=2)
    dl = make_dataloader(corpus.cuts, corpus.encoder, batching, num_workers=workers)
    assert dl.persistent_workers is (workers > 0)
    seen = []
    for batch in dl:
        assert batch["speech"].shape[0] == len(batch["ids"]) == batch["text"].shape[0]
        assert batch["audio_seconds"] <= 3.0 + 1e-9
        seen.extend(batch["ids"])
    assert sorted(seen) == sorted(corpus.cuts.ids)
    dl.sampler.set_epoch(1)
    assert sorted(i for b in dl for i in b["ids"]) == sorted(corpus.cuts.ids)
    if workers:  # not forks of the training process: see asrflow.train.batches.workers
        assert dl.multiprocessing_context.get_start_method() == "forkserver"


# A training script as Snakemake runs one: top-level code, no ``if __name__ == "__main__"``.
UNGUARDED_SCRIPT = """
import sys
from lhotse import load_manifest
from asrflow.text import TextNormalization
from asrflow.tokens import TokenEncoder
from asrflow.recipe.batching import Batching
from asrflow.train.batches.loader import make_dataloader
root = sys.argv[1]
with open(root + "/runs.txt", "a") as f:
    f.write("top-level code ran\\n")
encoder = TokenEncoder(root + "/bpe.model", root + "/tokens.txt", TextNormalization())
loader = make_dataloader(load_manifest(root + "/train.jsonl.gz"), encoder,
                         Batching(max_duration=3.0, num_buckets=2), num_workers=2)
print(sum(len(batch["ids"]) for batch in loader))
"""


def test_workers_of_an_unguarded_script_do_not_run_it_again(corpus):
    """The workers start from a fork server that imports only asrflow's loader modules: a
    script's top-level code (the train rule's, the trainer itself) must run once, not again in
    every worker, as it would with ``spawn`` or a fork server that imports ``__main__``."""
    script = corpus.root / "train_script.py"
    script.write_text(UNGUARDED_SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(corpus.root)],
        capture_output=True, text=True, timeout=300, cwd=corpus.root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(len(corpus.cuts))]
    assert (corpus.root / "runs.txt").read_text(encoding="utf-8") == "top-level code ran\n"


def _origin_ids(cuts) -> list[str]:
    return [re.sub(r"_rep\d+$", "", c.id) for c in cuts]


def test_mix_without_weights_is_every_cut_once():
    a, b = fake_cuts(30, "a"), fake_cuts(50, "b")
    assert [c.id for c in mix_epoch([a, b], None, epoch=3)] == [*a.ids, *b.ids]


def test_mix_holds_the_weights_in_every_epoch_and_rotates_through_the_big_corpus():
    a, b = fake_cuts(100, "a"), fake_cuts(1000, "b")  # old data 1:10 by size, weighted 1:1
    epochs = [mix_epoch([a, b], [1.0, 1.0], epoch=e, seed=5) for e in range(3)]
    for mixed in epochs:
        ids = [c.id for c in mixed]
        assert len(ids) == 1100 and len(set(ids)) == 1100  # repeats renamed: IDs unique
        assert sum(i.startswith("a") for i in ids) == 550  # the weights' share, exactly
        assert sorted(set(_origin_ids(c for c in mixed if c.id.startswith("a")))) == sorted(a.ids)
        repeated = next(c for c in mixed if c.id.endswith("_rep1"))
        assert repeated.duration == a[repeated.id.removesuffix("_rep1")].duration
    b_seen = [set(_origin_ids(c for c in m if c.id.startswith("b"))) for m in epochs]
    assert len(b_seen[0]) == 550 and b_seen[0] | b_seen[1] == set(b.ids)  # 2 epochs: all of b
    assert b_seen[0] != b_seen[2]
    again = [c.id for c in mix_epoch([a, b], [1.0, 1.0], epoch=1, seed=5)]
    assert again == [c.id for c in epochs[1]]  # a pure function of (epoch, seed)
    other = [c.id for c in mix_epoch([a, b], [1.0, 1.0], epoch=1, seed=6)]
    assert other != again
    shares = [sum(c.id.startswith("a") for c in mix_epoch([a, b], [1, 3], epoch=0))]
    assert shares == [275]


def test_mix_refuses_bad_weights_and_empty_corpora():
    a, b = fake_cuts(10, "a"), fake_cuts(10, "b")
    with pytest.raises(AsrflowError, match="one weight per corpus"):
        mix_epoch([a, b], [1.0], epoch=0)
    with pytest.raises(AsrflowError, match="weight 1 must be a positive"):
        mix_epoch([a, b], [1.0, 0.0], epoch=0)
    with pytest.raises(AsrflowError, match="corpus 1 has no train cuts"):
        mix_epoch([a, CutSet.from_cuts([])], [1.0, 1.0], epoch=0)


@pytest.mark.parametrize("world_size", [1, 2])
def test_epoch_mix_sampler_batches_each_epochs_mix_once_across_ranks(world_size: int):
    from asrflow.train.loop.resume import SkippingSampler

    sets = [fake_cuts(40, "a"), fake_cuts(200, "b", seed=5)]

    def epoch_cuts(epoch):
        return mix_epoch(sets, [1, 1], epoch, seed=0)

    settings = Batching(max_duration=15.0, num_buckets=3, seed=2)
    samplers = [
        EpochMixSampler(epoch_cuts, settings, world_size=world_size, rank=r)
        for r in range(world_size)
    ]
    assert (samplers[-1].world_size, samplers[-1].rank) == (world_size, world_size - 1)
    for epoch in (0, 1):
        seen = []
        for s in samplers:
            s.set_epoch(epoch)
            seen += [c.id for batch in s for c in batch]
        assert sorted(seen) == sorted(epoch_cuts(epoch).ids)
    # a resume in epoch 1 rebuilds that epoch's mix and skips the batches trained on
    full = ids_of(samplers[0])
    resumed = SkippingSampler(EpochMixSampler(epoch_cuts, settings, world_size, rank=0))
    resumed.set_epoch(1)
    resumed.skip = 3
    assert ids_of(resumed) == full[3:]


def test_speed_perturb_copies_the_train_set_per_factor(corpus):
    cuts = corpus.cuts
    out = speed_perturb(cuts, [0.9, 1.0, 1.1])
    assert len(out) == 3 * len(cuts)
    ids = [c.id for c in out]
    assert len(set(ids)) == len(ids)
    first = cuts[0]
    by_id = {c.id: c for c in out}
    slow, same, fast = by_id[f"{first.id}_sp0.9"], by_id[first.id], by_id[f"{first.id}_sp1.1"]
    assert same.duration == first.duration
    assert slow.duration == pytest.approx(first.duration / 0.9, abs=1e-3)
    assert fast.duration == pytest.approx(first.duration / 1.1, abs=1e-3)
    assert slow.supervisions[0].text == first.supervisions[0].text
    assert slow.supervisions[0].custom == first.supervisions[0].custom  # slices, origin kept
    # the audio really is resampled: 0.9 gives ~1/0.9 as many samples at the same rate
    batch = AsrDataset(corpus.encoder)[CutSet.from_cuts([first, slow])]
    n_same, n_slow = batch["speech_lengths"].tolist()
    assert n_slow == pytest.approx(n_same / 0.9, rel=0.01)
    assert speed_perturb(cuts, []) is cuts
    with pytest.raises(AsrflowError, match="repeat"):
        speed_perturb(cuts, [1.0, 1.0])


def test_mix_renames_an_id_that_two_corpora_share():
    a, b = fake_cuts(5, "x"), fake_cuts(5, "x", seed=3)  # the same five IDs in both
    for weights in (None, [1, 1]):
        ids = [c.id for c in mix_epoch([a, b], weights, epoch=0)]
        assert len(ids) == 10 and len(set(ids)) == 10


def write_float_wav(path: Path, seconds: float, bad: dict[int, float], sr: int = 16000) -> Path:
    """Float WAV of quiet noise with ``bad`` samples (index -> value, e.g. NaN) planted."""
    import numpy as np
    import soundfile

    path.parent.mkdir(parents=True, exist_ok=True)
    samples = (np.random.default_rng(0).standard_normal(round(seconds * sr)) * 0.1).astype(
        np.float32
    )
    for i, value in bad.items():
        samples[i] = value
    soundfile.write(path, samples, sr, subtype="FLOAT")
    return path


@pytest.mark.parametrize("workers", [0, 1])
def test_non_finite_audio_names_the_cut_and_its_file(corpus, workers: int):
    from asrflow.train.batches.loader import NonFiniteAudio

    root = corpus.root / "nan"
    write_wav(root / "good.wav", 0.5)
    bad = write_float_wav(root / "bad.wav", 0.5, {4000: float("nan"), 4001: float("inf")})
    manifest = write_nemo(
        root / "m.jsonl",
        [
            {"audio_filepath": "good.wav", "duration": 0.5, "text": "hello"},
            {"audio_filepath": "bad.wav", "duration": 0.5, "text": "there"},
        ],
    )
    cuts = CutSet.from_cuts(import_nemo(manifest))
    batching = Batching(max_duration=10.0, num_buckets=2)
    loader = make_dataloader(cuts, corpus.encoder, batching, num_workers=workers)
    with pytest.raises(NonFiniteAudio) as err:
        list(loader)
    msg = str(err.value)
    assert f"{bad}: cut bad ({manifest}:2) has 2 NaN/inf sample(s), the first at 0.250 s" in msg
    assert "good" not in msg.replace(str(root), "")  # only the bad cut is named
    assert "replace the audio file" in msg and "remove the utterance from the manifest" in msg
    # the fix a rerun needs: the same file, clean; the same manifest then loads
    write_float_wav(bad, 0.5, {})
    batch = AsrDataset(corpus.encoder)[cuts]
    assert torch.isfinite(batch["speech"]).all() and sorted(batch["ids"]) == ["bad", "good"]


def test_finite_samples_whose_sum_overflows_pass_the_non_finite_check():
    """check_finite tests the batch's sum first: finite samples whose float32 sum overflows to
    inf must still pass (the exact test decides), and one NaN or inf sample must still fail."""
    from asrflow.train.batches.loader import NonFiniteAudio, check_finite

    cuts = list(fake_cuts(2))
    speech = torch.full((2, 4), 3e38)
    assert not torch.isfinite(speech.sum())
    check_finite(speech, cuts, 16000)
    for bad in (float("nan"), float("inf"), float("-inf")):
        speech = torch.zeros(2, 4)
        speech[1, 2] = bad
        with pytest.raises(NonFiniteAudio, match=r"cut c0001 .* has 1 NaN/inf sample"):
            check_finite(speech, cuts, 16000)

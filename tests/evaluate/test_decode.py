"""The evaluate rule's decoding: exported package only, bf16 weights without autocast, the same
transcripts as ESPnet's Speech2Text; and evaluate_artifact's files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from asrflow.data.cuts import make_cut, save_cuts
from asrflow.errors import AsrflowError
from asrflow.evaluate.decode import (
    Decoding,
    PackageModel,
    UtteranceFrontend,
    batches,
    timed_transcribe,
)
from asrflow.evaluate.scoring import SCORING_VERSION, contract_sha256
from asrflow.evaluate.stages import decoding_from_config, evaluate_artifact
from asrflow.export.package import export_package, load_speech2text
from asrflow.text import TextNormalization
from tests.tiny_model import TEXTS, Trained, tiny_once


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return tiny_once(tmp_path_factory)


@pytest.fixture(scope="module")
def package(trained: Trained, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkg") / "tiny"
    export_package(
        state_dict_or_checkpoint=trained.lightning_ckpt,
        espnet_args=trained.args,
        bpe_model=trained.bpe_model,
        tokens_txt=trained.tokens,
        out_dir=out,
        artifact="last",
    )
    return out


def _transcribe(package: Path, audio, **decoding) -> tuple[PackageModel, list[str]]:
    model = PackageModel(package, Decoding(device="cpu", **decoding))
    hyps, seconds = timed_transcribe(model, audio, model.sample_rate, model.decoding.batch_seconds)
    assert seconds > 0
    return model, hyps


def test_greedy_path_decodes_like_speech2text(package, trained):
    s2t = load_speech2text(package, beam_size=1)
    espnet = [s2t(a)[0][0] for a in trained.audio]
    _, ours = _transcribe(package, trained.audio, dtype="float32", batch_seconds=0)
    assert ours == espnet == list(TEXTS)


def test_batched_decoding_gives_the_same_transcripts(package, trained):
    _, one = _transcribe(package, trained.audio, dtype="float32", batch_seconds=0)
    _, batched = _transcribe(package, trained.audio, dtype="float32", batch_seconds=60)
    assert batched == one


def test_an_utterances_features_are_the_same_in_any_batch(package):
    """ESPnet's frontend on a padded batch takes the last STFT windows of a shorter utterance
    over its zero padding (alone, over the reflection of its own samples), so its last frames,
    and through the attention its transcript, changed with the batch (on the demo 2 to 7 of 136
    dev transcripts in bf16 with batch_seconds 20-200). The decoder's frontend computes each
    utterance's features alone."""
    frontend = PackageModel(package, Decoding(device="cpu", dtype="float32")).model.frontend
    assert isinstance(frontend, UtteranceFrontend)
    rng = np.random.default_rng(0)
    short = torch.from_numpy(rng.standard_normal(8037).astype(np.float32))
    batch = torch.from_numpy(rng.standard_normal((2, 16000)).astype(np.float32))
    batch[0, short.numel() :] = 0.0
    batch[0, : short.numel()] = short
    lengths = torch.tensor([short.numel(), 16000])
    with torch.no_grad():
        alone, n = frontend(short[None], lengths[:1])
        together, m = frontend(batch, lengths)
        espnet, _ = frontend.inner(batch, lengths)  # what the batch gave before
    frames = int(n[0])
    assert int(m[0]) == frames and together.shape[1] > frames
    assert torch.equal(together[0, :frames], alone[0])
    assert (espnet[0, :frames] - alone[0]).abs().max() > 0.1  # the last frames differed
    assert frontend.output_size() == frontend.inner.output_size()


def test_the_decoders_version_is_in_the_fingerprint_and_the_evaluate_params(monkeypatch):
    """A decoder change that can change a transcript bumps DECODER_VERSION: its results are
    archived beside the old ones, never taken for them, and every evaluation reruns."""
    from asrflow import runs
    from asrflow.evaluate import decode
    from asrflow.evaluate.versions import DECODER_VERSION
    from tests.configs import config_with_runs

    assert runs.eval_params(config_with_runs(r={}))["decoder_version"] == DECODER_VERSION
    before = Decoding().sha256()
    monkeypatch.setattr(decode, "DECODER_VERSION", DECODER_VERSION + 1)
    assert Decoding().sha256() != before


def test_bf16_casts_the_encoder_and_ctc_but_keeps_the_frontend_fp32(package, trained):
    model, hyps = _transcribe(package, trained.audio, dtype="bfloat16")
    assert model.dtypes["frontend"] == "float32"
    assert model.dtypes["encoder"] == model.dtypes["ctc"] == "bfloat16"
    assert all(p.dtype == torch.bfloat16 for p in model.model.encoder.parameters())
    assert all(p.dtype == torch.float32 for p in model.model.frontend.parameters())
    assert hyps == list(TEXTS)


def test_beam_mode_uses_speech2text_with_the_same_casts(package, trained):
    model, hyps = _transcribe(package, trained.audio, dtype="bfloat16", mode="beam", beam_size=2)
    assert model.dtypes["encoder"] == "bfloat16"
    assert hyps == list(TEXTS)


def test_autocast_is_refused(package, trained):
    model = PackageModel(package, Decoding(device="cpu", dtype="bfloat16"))
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(AsrflowError, match="autocast"):
        model.transcribe(trained.audio[:1])


def test_a_modified_package_is_refused(package, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(package, copy)
    (copy / "tokens.txt").write_text("<blank>\n")
    with pytest.raises(AsrflowError, match=r"tokens\.txt"):
        PackageModel(copy, Decoding(device="cpu"))


def test_batches_group_by_duration_within_the_limit():
    durations = [3.0, 1.0, 2.0, 10.0, 1.5]
    groups = list(batches(durations, 4.0))
    assert sorted(i for g in groups for i in g) == [0, 1, 2, 3, 4]
    assert groups == [[1, 4], [2], [0], [3]]  # sorted by duration; 10 s alone
    assert list(batches(durations, 0)) == [[1], [4], [2], [0], [3]]


def test_decoding_settings_are_checked():
    with pytest.raises(AsrflowError, match="mode"):
        Decoding(mode="sampling")
    with pytest.raises(AsrflowError, match="dtype"):
        Decoding(dtype="int8")
    d = decoding_from_config({"dtype": "float32", "decoding": {"mode": "beam", "beam_size": 4}})
    assert (d.dtype, d.mode, d.beam_size, d.device) == ("float32", "beam", 4, "auto")


def test_the_schema_defaults_are_the_decoding_defaults():
    """One set of defaults: what config.yaml leaves out decodes as the schema says."""
    import dataclasses

    import yaml

    schema = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "config/config.schema.yaml").read_text()
    )
    evaluation = schema["properties"]["evaluation"]["properties"]
    defaults = {k: v["default"] for k, v in evaluation["decoding"]["properties"].items()}
    # the schema's mode auto is resolved per run (rule word_lm) before a Decoding decodes;
    # a Decoding made without a mode is greedy, what auto takes for an open vocabulary
    assert defaults.pop("mode") == "auto" and Decoding().mode == "greedy_ctc"
    top = ("dtype", "device", "batch_seconds", "window_seconds", "window_overlap_seconds")
    defaults |= {k: evaluation[k]["default"] for k in top}
    fields = {f.name: f.default for f in dataclasses.fields(Decoding) if f.name != "mode"}
    assert defaults == fields
    assert decoding_from_config({}) == Decoding()


def _eval_set(trained: Trained, directory: Path) -> Path:
    """The four training utterances as WAVs + cuts, with a slice field and messy references."""
    cuts = []
    refs = ["Red.", "BLUE", "red, blue!", "blue red green"]  # the last has a word the model lacks
    for i, (audio, ref) in enumerate(zip(trained.audio, refs, strict=True)):
        wav = directory / f"u{i}.wav"
        soundfile.write(wav, (audio * 32767).astype(np.int16), 16000, subtype="PCM_16")
        cuts.append(
            make_cut(
                utt_id=f"u{i}",
                audio=str(wav),
                sampling_rate=16000,
                num_samples=len(audio),
                duration=len(audio) / 16000,
                text=ref,
                custom={"condition": "clean" if i < 2 else "noisy"},
            )
        )
    path = directory / "dev.jsonl.gz"
    save_cuts(cuts, path)
    return path


def test_evaluate_artifact_writes_pooled_and_sliced_scores(package, trained, tmp_path):
    cuts = _eval_set(trained, tmp_path)
    out = tmp_path / "eval"
    contract = TextNormalization()
    summary = evaluate_artifact(
        package,
        cuts,
        run="tiny",
        artifact="last",
        eval_set="toy.dev",
        contract=contract,
        decoding=Decoding(device="cpu", dtype="bfloat16"),
        slice_fields=["condition"],
        summary_path=out / "summary.json",
        utterances_csv=out / "utterances.csv",
        alignments_txt=out / "alignments.txt",
        threads=1,
    )
    # only "green" is missed: one deletion in 1 + 1 + 2 + 3 = 7 reference words
    assert (summary["deletions"], summary["substitutions"], summary["insertions"]) == (1, 0, 0)
    assert summary["confusions"]["deletions"] == [["green", 1]]
    assert summary["confusions"]["words_wrong"] == [["green", 1, 1]]
    assert summary["wer"] == pytest.approx(1 / 7)
    assert summary["slices"]["condition"]["clean"]["wer"] == 0
    assert summary["slices"]["condition"]["noisy"]["wer"] == pytest.approx(1 / 5)
    # 95 % intervals (fractions, like wer) overall and per slice; the bootstrap recorded once
    assert summary["wer_ci_low"] <= summary["wer"] <= summary["wer_ci_high"]
    assert summary["cer_ci_low"] <= summary["cer"] <= summary["cer_ci_high"]
    assert summary["interval"]["resamples"] == 1000 and summary["interval"]["seed"] == 0
    clean = summary["slices"]["condition"]["clean"]
    assert (clean["wer_ci_low"], clean["wer_ci_high"]) == (0.0, 0.0)  # no errors to resample
    noisy = summary["slices"]["condition"]["noisy"]
    assert noisy["wer_ci_low"] <= 1 / 5 <= noisy["wer_ci_high"] and "cer_ci_high" in noisy
    assert summary["contract_sha256"] == contract_sha256(contract)
    assert summary["scoring_version"] == SCORING_VERSION
    assert summary["dtypes"]["encoder"] == "bfloat16" and summary["autocast"] is False
    assert summary["rtf"] > 0 and summary["audio_seconds"] > 0
    assert json.loads((out / "summary.json").read_text()) == summary
    rows = list(csv.DictReader((out / "utterances.csv").open()))
    assert [r["id"] for r in rows] == ["u0", "u1", "u2", "u3"]
    assert rows[2]["ref_norm"] == "red blue" and rows[2]["condition"] == "noisy"
    alignments = (out / "alignments.txt").read_text()
    assert "u3" in alignments and "u0" not in alignments


def test_baseline_of_a_fine_tuning_run_is_its_init_model_exported_as_it_is(
    package, trained, tmp_path
):
    """A fine-tuning run's baseline: the init weights with the init model's own config, token
    list and BPE model, from an asrflow package or an ESPnet model directory."""
    import shutil

    import yaml

    from asrflow.select.stages import export_baseline

    manifest = export_baseline(package, tmp_path / "from-package")
    assert manifest["artifact"] == "baseline"
    assert (
        manifest["files"]["model.pth"]
        == json.loads((package / "package.json").read_text())["files"]["model.pth"]
    )

    espnet_dir = tmp_path / "exp" / "asr_tiny"  # as ESPnet leaves it: bpemodel relative
    espnet_dir.mkdir(parents=True)
    shutil.copy(package / "model.pth", espnet_dir / "valid.acc.ave.pth")
    (espnet_dir / "data").mkdir()
    shutil.copy(package / "bpe.model", espnet_dir / "data" / "bpe.model")
    config = yaml.safe_load((package / "config.yaml").read_text())
    config["bpemodel"] = "data/bpe.model"
    (espnet_dir / "config.yaml").write_text(yaml.safe_dump(config))
    export_baseline(espnet_dir, tmp_path / "from-espnet")
    _, hyps = _transcribe(tmp_path / "from-espnet", trained.audio, dtype="float32")
    assert hyps == list(TEXTS)

    bare = tmp_path / "bare.pth"
    shutil.copy(package / "model.pth", bare)
    with pytest.raises(AsrflowError, match=r"no ESPnet config\.yaml"):
        export_baseline(bare, tmp_path / "from-bare")

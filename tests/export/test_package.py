"""Export packages and load them with ESPnet's own Speech2Text.

A tiny CTC transformer is really trained, in the module fixture, until greedy CTC transcribes
its four spoken training utterances; every package must then make ESPnet print the same text.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from asrflow.errors import AsrflowError
from asrflow.export.package import (
    BPE_MODEL,
    CONFIG,
    FILES,
    MANIFEST,
    MODEL,
    TOKENS,
    export_package,
    load_speech2text,
    verify_package,
)
from asrflow.hashing import sha256_file
from tests.tiny_model import TEXTS, Trained, tiny_once


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return tiny_once(tmp_path_factory)


def _export(trained: Trained, out_dir: Path, source: Path | None = None, **kw: Any) -> dict:
    kw.setdefault("espnet_args", trained.args)
    return export_package(
        state_dict_or_checkpoint=source or trained.lightning_ckpt,
        bpe_model=trained.bpe_model,
        tokens_txt=trained.tokens,
        out_dir=out_dir,
        artifact="tiny-last",
        **kw,
    )


def _decode(s2t: Any, audio: list[np.ndarray]) -> list[str]:
    return [s2t(a)[0][0] for a in audio]


def _assert_same_weights(s2t: Any, model: torch.nn.Module) -> None:
    loaded = s2t.asr_model.state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(loaded[k], v), k


@pytest.mark.parametrize("source", ["lightning_ckpt", "state_dict"])
def test_speech2text_transcribes_like_the_trained_model(trained, tmp_path, source):
    out = tmp_path / "pkg"
    manifest = _export(trained, out, getattr(trained, source), provenance={"run": "tiny"})

    assert manifest["source"]["format"] == {"lightning_ckpt": "lightning"}.get(source, source)
    assert manifest["ctc_only"] is True
    s2t = load_speech2text(out)
    _assert_same_weights(s2t, trained.model)
    assert _decode(s2t, trained.audio) == trained.transcripts == list(TEXTS)


def test_plain_speech2text_loads_the_package_from_another_directory(trained, tmp_path, monkeypatch):
    from espnet2.bin.asr_inference import Speech2Text

    out = tmp_path / "pkg"
    _export(trained, out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s2t = Speech2Text(out / CONFIG, out / MODEL, ctc_weight=1.0, beam_size=4)
    assert _decode(s2t, trained.audio) == trained.transcripts
    # the weights ESPnet reads are the model's own, without Lightning's prefix
    state = torch.load(out / MODEL, map_location="cpu", weights_only=True)
    assert list(state) == list(trained.model.state_dict())


def test_moved_package_still_decodes(trained, tmp_path):
    first = tmp_path / "first" / "pkg"
    _export(trained, first)
    moved = tmp_path / "second" / "renamed"
    moved.parent.mkdir()
    shutil.move(first, moved)
    assert not first.exists()

    s2t = load_speech2text(moved, beam_size=4)
    assert _decode(s2t, trained.audio) == trained.transcripts


def test_prefixed_state_dict_is_refused(trained, tmp_path):
    garbage = tmp_path / "prefixed.pth"
    torch.save({f"model.{k}": v for k, v in trained.model.state_dict().items()}, garbage)
    out = tmp_path / "pkg"

    with pytest.raises(AsrflowError, match=r"key 'model\.[a-z_.0-9]+'.*prefix"):
        _export(trained, out, garbage)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["prefixed.pth"]


def test_missing_and_misshapen_keys_are_refused(trained, tmp_path):
    state = dict(trained.model.state_dict())
    key = "ctc.ctc_lo.weight"
    missing = tmp_path / "missing.pth"
    torch.save({k: v for k, v in state.items() if k != "ctc.ctc_lo.bias"}, missing)
    with pytest.raises(AsrflowError, match=r"lacks.*'ctc\.ctc_lo\.bias'"):
        _export(trained, tmp_path / "pkg", missing)

    misshapen = tmp_path / "misshapen.pth"
    torch.save({**state, key: state[key][:-1]}, misshapen)
    with pytest.raises(AsrflowError, match=r"'ctc\.ctc_lo\.weight' has shape"):
        _export(trained, tmp_path / "pkg", misshapen)


def test_a_token_list_that_does_not_match_is_refused(trained, tmp_path):
    wrong = tmp_path / "tokens.txt"
    lines = trained.tokens.read_text(encoding="utf-8").splitlines()
    wrong.write_text("\n".join([lines[0], lines[1], *reversed(lines[2:-1]), lines[-1]]) + "\n")
    with pytest.raises(AsrflowError, match="mismatch"):
        export_package(
            state_dict_or_checkpoint=trained.lightning_ckpt,
            espnet_args=trained.args,
            bpe_model=trained.bpe_model,
            tokens_txt=wrong,
            out_dir=tmp_path / "pkg",
            artifact="x",
        )


def test_manifest_records_every_file(trained, tmp_path):
    out = tmp_path / "pkg"
    manifest = _export(trained, out, provenance={"run": "tiny", "criterion": "valid/loss"})

    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, MANIFEST])
    assert json.loads((out / MANIFEST).read_text(encoding="utf-8")) == manifest
    assert manifest["files"] == {name: sha256_file(out / name) for name in FILES}
    assert manifest["source"] == {
        "path": str(trained.lightning_ckpt),
        "sha256": sha256_file(trained.lightning_ckpt),
        "format": "lightning",
    }
    assert manifest["artifact"] == "tiny-last"
    assert manifest["provenance"] == {"run": "tiny", "criterion": "valid/loss"}
    assert set(manifest["versions"]) >= {"espnet", "torch"} and manifest["versions"]["espnet"]
    assert (out / BPE_MODEL).read_bytes() == trained.bpe_model.read_bytes()
    assert (out / TOKENS).read_bytes() == trained.tokens.read_bytes()
    verify_package(out)

    (out / TOKENS).write_text("tampered\n", encoding="utf-8")
    with pytest.raises(AsrflowError, match=r"tokens\.txt"):
        load_speech2text(out)


def test_reexport_leaves_the_package_untouched(trained, tmp_path):
    out = tmp_path / "pkg"
    _export(trained, out)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    time.sleep(0.01)

    # the args as the run stores them (espnet_config.json) give the very same package
    as_json = json.loads(json.dumps(vars(trained.args), default=str))
    _export(trained, out, espnet_args=as_json)
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    assert after == before
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"]  # no temporary directories left


def test_reexport_from_another_source_replaces_the_package(trained, tmp_path):
    out = tmp_path / "pkg"
    _export(trained, out)
    model_bytes = (out / MODEL).read_bytes()
    manifest = _export(trained, out, trained.state_dict)
    assert manifest["source"]["format"] == "state_dict"
    assert (out / MODEL).read_bytes() == model_bytes  # same weights, same bytes
    assert json.loads((out / MANIFEST).read_text(encoding="utf-8")) == manifest
    assert sorted(os.listdir(tmp_path)) == ["pkg"]


def test_a_disk_that_fills_during_export_publishes_nothing(trained, tmp_path):
    """The real export (torch.save, file copies) in a process whose files may not outgrow the
    package's largest file but model.pth: the write fails, the old package stays as it was."""
    from tests.test_io import run_with_file_size_limit

    out = tmp_path / "pkg"
    _export(trained, out)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    sizes = {name: len(data) for name, (data, _) in before.items()}
    limit = max(size for name, size in sizes.items() if name != MODEL) + 1
    assert sizes[MODEL] > limit, sizes  # model.pth is the write that runs out of room
    args = tmp_path / "espnet_config.json"
    args.write_text(json.dumps(vars(trained.args), default=str), encoding="utf-8")
    setup = f"""
        import json
        from pathlib import Path
        from asrflow.export.espnet_model import build_espnet_model
        from asrflow.export.package import export_package
        args = json.loads(Path({str(args)!r}).read_text())
    """
    code = f"""
        export_package(
            state_dict_or_checkpoint={str(trained.state_dict)!r}, espnet_args=args,
            bpe_model={str(trained.bpe_model)!r}, tokens_txt={str(trained.tokens)!r},
            out_dir={str(out)!r}, artifact="tiny-last",
        )
    """
    proc = run_with_file_size_limit(code, limit, tmp_path, setup)
    assert proc.returncode == 3, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"WriteFailed: {out}: could not be written whole (")
    ), proc.stderr
    assert f"Nothing half-written was kept: {out} keeps the package it held before" in proc.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    assert after == before
    assert sorted(os.listdir(tmp_path)) == ["espnet_config.json", "pkg"]  # no half-built package
    verify_package(out)

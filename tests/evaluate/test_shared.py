"""Identical weights are decoded once per eval set, contract and decoding settings."""

from __future__ import annotations

import json
import threading

from asrflow.evaluate.shared import evaluate_once


def _fake_evaluate(calls: list[str], artifact: str):
    def evaluate(*, summary_path, utterances_csv, alignments_txt):
        calls.append(artifact)
        summary = {"run": "r", "artifact": artifact, "eval_set": "c.dev", "wer": 0.25}
        summary_path.write_text(json.dumps(summary))
        utterances_csv.write_text("id,reference\nu1,a b\n")
        alignments_txt.write_text(f"r {artifact} on c.dev; scoring contract abc\n\nu1\n...\n")
        return summary

    return evaluate


def _evaluate(tmp_path, calls, artifact, key="k1"):
    out = tmp_path / artifact
    out.mkdir(exist_ok=True)
    return evaluate_once(
        _fake_evaluate(calls, artifact),
        key,
        tmp_path / "cache",
        run="r",
        artifact=artifact,
        eval_set="c.dev",
        package_files={"model.pth": "same", "config.yaml": artifact},
        run_hashes={"recipe": f"recipe of {artifact}"},
        adapter_bytes=len(artifact),
        summary_path=out / "summary.json",
        utterances_csv=out / "utterances.csv",
        alignments_txt=out / "alignments.txt",
    )


def test_the_second_artifact_with_the_same_key_copies_the_first(tmp_path):
    calls: list[str] = []
    first = _evaluate(tmp_path, calls, "last")
    second = _evaluate(tmp_path, calls, "valid.loss.best")
    assert calls == ["last"]  # decoded once
    assert (
        first["decoded_by"]
        == second["decoded_by"]
        == {
            "run": "r",
            "artifact": "last",
            "eval_set": "c.dev",
        }
    )
    assert second["artifact"] == "valid.loss.best" and second["wer"] == first["wer"]
    assert second["package_files"]["config.yaml"] == "valid.loss.best"
    assert second["run_hashes"] == {"recipe": "recipe of valid.loss.best"}  # its own record
    assert second["adapter_bytes"] == len("valid.loss.best")
    saved = json.loads((tmp_path / "valid.loss.best" / "summary.json").read_text())
    assert saved == second
    alignments = (tmp_path / "valid.loss.best" / "alignments.txt").read_text()
    assert alignments.startswith("r valid.loss.best on c.dev;") and "u1" in alignments
    assert (tmp_path / "valid.loss.best" / "utterances.csv").read_text().startswith("id,")
    _evaluate(tmp_path, calls, "valid.wer.ave_2best", key="k2")  # other weights: decoded
    assert calls == ["last", "valid.wer.ave_2best"]


def test_parallel_jobs_with_one_key_decode_once(tmp_path):
    calls: list[str] = []
    threads = [
        threading.Thread(target=_evaluate, args=(tmp_path, calls, name)) for name in ("a", "b", "c")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_the_decode_key_holds_no_path_of_the_project(tmp_path):
    """Issue 30: a moved or copied project keeps its decodes. The key hashes file contents and
    the config without ``bpemodel`` (the package's absolute path), never where they lie."""
    import shutil

    from asrflow.evaluate.decode import Decoding
    from asrflow.evaluate.shared import decode_key
    from asrflow.text import TextNormalization

    def key(root):
        package = root / "results/runs/r/export/last"
        return decode_key(
            package, {"model.pth": "m", "config.yaml": "c"}, root / "results/dev.jsonl.gz",
            TextNormalization(), Decoding(),
        )  # fmt: skip

    first = tmp_path / "first"
    (first / "results/runs/r/export/last").mkdir(parents=True)
    (first / "results/dev.jsonl.gz").write_bytes(b"cuts")
    config = {"encoder": "conformer", "token_list": ["a"]}
    for root in (first, tmp_path / "copy"):
        if root != first:
            shutil.copytree(first, root)
        bpe = root / "results/runs/r/export/last/bpe.model"
        (bpe.parent / "config.yaml").write_text(json.dumps({**config, "bpemodel": str(bpe)}))
    assert key(first) == key(tmp_path / "copy")


def test_the_decode_key_tells_a_filtered_eval_set_from_the_whole(tmp_path):
    """What of the eval cuts is scored is part of the key (the summary's ``eval_cuts_sha256``,
    :func:`asrflow.evaluate.eval_set.scored_sha256`): a filtered set never copies the whole
    set's decode, and settings meaning the same bounds give the same key."""
    from asrflow.evaluate.decode import Decoding
    from asrflow.evaluate.shared import decode_key
    from asrflow.text import TextNormalization

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "config.yaml").write_text(json.dumps({"encoder": "conformer"}))
    (tmp_path / "dev.jsonl.gz").write_bytes(b"cuts")

    def key(eval_filter):
        return decode_key(
            package, {"model.pth": "m"}, tmp_path / "dev.jsonl.gz", TextNormalization(),
            Decoding(), eval_filter=eval_filter,
        )  # fmt: skip

    assert key(None) != key({"max_duration": 60})
    assert key({"max_duration": 60}) == key({"max_duration": 60.0, "min_duration": 0})
    assert key({"max_duration": 60}) != key({"max_duration": 61})

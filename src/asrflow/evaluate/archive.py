"""The eval archive: every evaluation summary ever written, kept by what decided its result.

The evaluate rule writes each summary also to ``results/archive/evals/<name>.json``
(:func:`archive_eval_summary`, name by :func:`archive_name`: the artifact's sha256, the eval set,
the eval cuts' and scoring contract's sha256 and the decoding settings' sha256). The file is not a
declared output (a data revision must add rows to the comparison, not replace the old ones); the
evaluate record names it (``details.archived``) and the report's record lists every archived
summary it read as an extra input (``archive``), so both ends of this side channel are on record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from asrflow.errors import AsrflowError
from asrflow.io import write_json
from asrflow.types import Pathlike

ARCHIVE_KEY = ("artifact_sha256", "eval_set", "eval_cuts_sha256", "contract_sha256")
"""What makes two eval summaries the same result: same model bytes, eval cuts and contract."""
DECODING_KEY = "decoding_sha256"
"""Part of an archived result's identity since the decoding modes grew (absent in older ones)."""


def archive_name(summary: Mapping[str, Any]) -> str:
    """``<artifact_sha256[:16]>.<eval_set>.<eval_cuts_sha256[:12]>.<contract_sha256[:12]>``,
    then ``.<decoding_sha256[:8]>`` when the summary has one, and ``.json``: the same model
    decoded another way keeps its own file."""
    missing = [k for k in ARCHIVE_KEY if not summary.get(k)]
    if missing:
        raise AsrflowError(
            f"eval summary of run {summary.get('run')!r}, artifact {summary.get('artifact')!r} "
            f"lacks {', '.join(missing)}; it cannot be archived (re-run the evaluation)"
        )
    eval_set = str(summary["eval_set"])
    if "/" in eval_set or "\\" in eval_set or eval_set.startswith("."):
        raise AsrflowError(f"eval set name {eval_set!r} cannot be part of a file name")
    decoding = f".{summary[DECODING_KEY][:8]}" if summary.get(DECODING_KEY) else ""
    return (
        f"{summary['artifact_sha256'][:16]}.{eval_set}."
        f"{summary['eval_cuts_sha256'][:12]}.{summary['contract_sha256'][:12]}{decoding}.json"
    )


def archive_eval_summary(summary: Mapping[str, Any], archive_dir: Pathlike) -> Path:
    """Keep ``summary`` in ``archive_dir`` under :func:`archive_name`; returns its path.

    The same result written again leaves the file untouched (same bytes, same mtime). A summary
    with the same key but other content (a re-evaluation of the same model bytes on the same cuts
    under the same contract, e.g. with new timings) replaces it.
    """
    path = Path(archive_dir) / archive_name(summary)
    write_json(path, dict(summary))
    return path


def load_archive(archive_dir: Pathlike) -> list[dict[str, Any]]:
    """Every archived eval summary in ``archive_dir`` (sorted by file name); [] if none."""
    out = []
    for path in archive_files(archive_dir):
        try:
            out.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as e:
            raise AsrflowError(f"{path}: not a readable JSON eval summary ({e}); delete it") from e
    return out


def archive_files(archive_dir: Pathlike) -> list[Path]:
    """The archived summaries' files (what :func:`load_archive` reads), sorted."""
    root = Path(archive_dir)
    return sorted(root.glob("*.json")) if root.is_dir() else []

"""Per-slice results of evaluations as one long table (for the per-slice plots and tables).

Each eval summary's ``slices`` (:func:`asrflow.evaluate.scoring.sliced_with_intervals`: per slice
field, e.g. ``condition``, per value, its pooled WER and CER) becomes one row per run x artifact x
eval set x field x value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd


def slice_table(
    eval_summaries: Sequence[Mapping[str, Any]], eval_set: str | None = None
) -> pd.DataFrame:
    """Long table of per-slice results: run, artifact, eval_set, field, value, wer, ... .

    With ``eval_set`` only that eval set's summaries are used.
    """
    rows = []
    for s in eval_summaries:
        if eval_set is not None and s.get("eval_set") != eval_set:
            continue
        for field, values in (s.get("slices") or {}).items():
            for value, p in values.items():
                rows.append(
                    {
                        "run": s.get("run"),
                        "artifact": s.get("artifact"),
                        "eval_set": s.get("eval_set"),
                        "contract_sha256": s.get("contract_sha256"),
                        "field": field,
                        "value": value,
                        "wer": p.get("wer"),
                        "cer": p.get("cer"),
                        "num_utterances": p.get("num_utterances"),
                        "ref_words": p.get("ref_words"),
                    }
                )
    columns = [
        "run",
        "artifact",
        "eval_set",
        "contract_sha256",
        "field",
        "value",
        "wer",
        "cer",
        "num_utterances",
        "ref_words",
    ]
    df = pd.DataFrame(rows, columns=columns)
    for col in ("wer", "cer"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df

"""Rule publish_selected: a copy of the package a run's selection chose, where its children
start from (``init: {run: <run>}``: :func:`asrflow.lineage.with_init_runs`).

The copy is plain files (:data:`asrflow.export.find.PACKAGE_FILES` in
``results/runs/<run>/selected/``), not a directory output: when the parent is revised and its
selection comes out with the same bytes, Snakemake's checksums of these files say nothing
changed and the children do not retrain; new weights (or another artifact chosen) do retrain
them. The package's own ``package.json`` travels with it, so the child's summary can name the
parent's artifact and what it was made from.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from asrflow.errors import AsrflowError
from asrflow.export.find import PACKAGE_ADAPTER as ADAPTER
from asrflow.export.find import PACKAGE_FILES
from asrflow.io import atomic_output, read_json
from asrflow.types import Pathlike

log = logging.getLogger(__name__)


def publish_selected(selected: Pathlike, packages: Sequence[Pathlike], out: Pathlike) -> Path:
    """Copy the package ``selected`` (a ``selected.json``) names, one of ``packages`` (the
    run's export directories, named by artifact), into ``out``; returns the package copied."""
    choice = read_json(selected)["selected"]
    by_name = {Path(p).name: Path(p) for p in packages}
    if choice not in by_name:
        raise AsrflowError(
            f"{selected}: selects {choice!r}, which is not among the run's exported packages "
            f"({', '.join(sorted(by_name))}); rerun select_model"
        )
    source = by_name[choice]
    for name in PACKAGE_FILES:
        if not (source / name).is_file():
            raise AsrflowError(f"{source}: has no {name}; re-export the package")
        with atomic_output(Path(out) / name) as tmp:
            shutil.copyfile(source / name, tmp)
    # the adapter-only export of a LoRA run travels with it (not a declared output: a run
    # without adapters has none, and one left by an earlier selection must not stay)
    adapter = Path(out) / ADAPTER
    if (source / ADAPTER).is_file():
        with atomic_output(adapter) as tmp:
            shutil.copyfile(source / ADAPTER, tmp)
    else:
        adapter.unlink(missing_ok=True)
    log.info("published %s as %s", source, out)
    return source

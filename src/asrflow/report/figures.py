"""The report's figures as the HTML page embeds them: PNG bytes with what they show, written into
the page as ``data:`` URIs so that the page is one self-contained file.

The plot rules write the PNGs (``snakemake --report`` shows the same files):

- ``results/report/plots/<run>/learning_curves.png`` (rule ``plot_learning_curves``);
- ``results/report/plots/<run>/<eval_set>.slices.png`` (rule ``plot_slices``);
- ``results/runs/<run>/audit/batches.png`` (the batch audit before training);
- the forest plot of the WER differences (rule ``plot_differences``,
  ``results/report/plots/differences.png``) is drawn from the comparison table itself, so the
  report rule draws it in memory (:func:`asrflow.report.plots.png_bytes`) rather than reading it.

Example::

    figures = figures_from_files(snakemake.input.plots)
    figures[0].kind, figures[0].run   # ("learning_curves", "r1")
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from asrflow.errors import AsrflowError
from asrflow.types import Pathlike

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

DIFFERENCES = "differences"
LEARNING_CURVES = "learning_curves"
SLICES = "slices"
AUDIT = "audit"
KINDS = (DIFFERENCES, LEARNING_CURVES, SLICES, AUDIT)
"""What a figure shows, in the order the page shows a run's figures."""

SLICES_SUFFIX = ".slices.png"

CAPTIONS = {
    DIFFERENCES: (
        "Each artifact's WER difference to its run's selected artifact (points; left of the "
        "dashed line: fewer errors), with the paired 95 % interval; an interval that excludes 0 "
        "is a difference at 95 %."
    ),
    LEARNING_CURVES: (
        "Against optimizer steps: train and valid loss per token, valid WER/CER (greedy CTC on "
        "dev), learning rate and gradient norm before clipping."
    ),
    SLICES: (
        "WER per slice value of every artifact, with the slice's 95 % interval (a bootstrap over "
        "its utterances)."
    ),
    AUDIT: "Tokens and padding per batch of the train sampler, before training.",
}
"""What each kind of figure shows, in words (the captions of ``report/*.rst`` without their
templates)."""


@dataclass(frozen=True)
class PageFigure:
    """One PNG of the page: ``kind`` (one of :data:`KINDS`), the ``run`` and ``eval_set`` it is
    of (``None`` for the forest plot over all runs) and its bytes."""

    kind: str
    png: bytes
    run: str | None = None
    eval_set: str | None = None

    @property
    def title(self) -> str:
        """``"Learning curves"``, ``"WER per slice: demo.test"``, ..."""
        if self.kind == SLICES:
            return f"WER per slice: {self.eval_set}"
        return {
            DIFFERENCES: "WER difference to each run's selected artifact",
            LEARNING_CURVES: "Learning curves",
            AUDIT: "Batch audit",
        }[self.kind]

    @property
    def caption(self) -> str:
        return CAPTIONS[self.kind]

    def data_uri(self) -> str:
        """The PNG as a ``data:image/png;base64,...`` URI."""
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def figure_kind(path: Pathlike) -> tuple[str, str, str | None]:
    """``(kind, run, eval_set)`` of a plot rule's PNG, from its path (see the module
    docstring); an error for any other file."""
    p = Path(path)
    if p.name == "learning_curves.png":
        return LEARNING_CURVES, p.parent.name, None
    if p.name.endswith(SLICES_SUFFIX):
        return SLICES, p.parent.name, p.name[: -len(SLICES_SUFFIX)]
    if p.name == "batches.png" and p.parent.name == "audit":
        return AUDIT, p.parent.parent.name, None
    raise AsrflowError(f"{p}: not a figure the report knows (learning curves, slices, audit)")


def read_figure(path: Pathlike) -> PageFigure:
    """The PNG at ``path`` as a :class:`PageFigure`; an error if it is not a PNG."""
    kind, run, eval_set = figure_kind(path)
    png = Path(path).read_bytes()
    if not png.startswith(PNG_MAGIC):
        raise AsrflowError(f"{path}: not a PNG")
    return PageFigure(kind, png, run, eval_set)


def figures_from_files(paths: Iterable[Pathlike]) -> list[PageFigure]:
    """Every figure of ``paths``, in the page's order: by run, then :data:`KINDS`, then eval
    set."""
    figures = [read_figure(p) for p in paths]
    return sorted(figures, key=lambda f: (f.run or "", KINDS.index(f.kind), f.eval_set or ""))

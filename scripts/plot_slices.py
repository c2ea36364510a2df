"""Snakemake adapter of rule plot_slices -> asrflow.report.stages.slice_plot."""

from asrflow.report.stages import slice_plot
from asrflow.workflow import step

with step(snakemake):
    slice_plot(snakemake.input.evaluations, snakemake.output.figure, snakemake.wildcards.eval_set)

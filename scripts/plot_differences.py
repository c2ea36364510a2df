"""Snakemake adapter of rule plot_differences -> asrflow.report.stages.difference_plot."""

from asrflow.report.stages import difference_plot
from asrflow.workflow import step

with step(snakemake):
    difference_plot(snakemake.input.comparison, snakemake.output.figure)

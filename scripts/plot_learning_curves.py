"""Snakemake adapter of rule plot_learning_curves -> asrflow.report.stages.learning_curves."""

from asrflow.report.stages import learning_curves
from asrflow.workflow import step

with step(snakemake):
    learning_curves(snakemake.input.artifacts, snakemake.output.figure, snakemake.wildcards.run)

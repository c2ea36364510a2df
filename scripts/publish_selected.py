"""Snakemake adapter of rule publish_selected -> asrflow.select.publish.publish_selected."""

from pathlib import Path

from asrflow.select.publish import publish_selected
from asrflow.workflow import step

with step(snakemake):
    publish_selected(
        snakemake.input.selected,
        list(snakemake.input.packages),
        Path(snakemake.output.package[0]).parent,
    )

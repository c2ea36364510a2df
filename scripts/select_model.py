"""Snakemake adapter of rule select_model -> asrflow.select.choose.select_run."""

from asrflow.select.choose import select_run
from asrflow.workflow import step

with step(snakemake):
    select_run(
        snakemake.input.evaluations,
        run=snakemake.wildcards.run,
        dev_set=snakemake.params.dev_set,
        out=snakemake.output.selected,
        utterances=snakemake.input.utterances,
        require_significant=snakemake.params.require_significant,
        validation_reports=snakemake.input.validation,
        train_corpora=snakemake.params.train_corpora,
        test_sets=snakemake.params.test_sets,
    )

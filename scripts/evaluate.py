"""Snakemake adapter of rule evaluate -> asrflow.evaluate.stages.evaluate_artifact_once."""

from asrflow.evaluate.archive import archive_eval_summary
from asrflow.evaluate.stages import decoding_from_config, evaluate_artifact_once
from asrflow.text import TextNormalization
from asrflow.workflow import step

with step(snakemake) as s:
    evaluation = snakemake.params.evaluation
    summary = evaluate_artifact_once(
        snakemake.input.package,
        snakemake.input.cuts,
        cache_dir=snakemake.params.decodes,
        run=snakemake.wildcards.run,
        artifact=snakemake.wildcards.artifact,
        eval_set=snakemake.wildcards.eval_set,
        contract=TextNormalization.from_dict(evaluation["scoring"]),
        decoding=decoding_from_config({**evaluation, **evaluation["operational"]}),
        slice_fields=snakemake.params.slice_fields,
        summary_path=snakemake.output.summary,
        utterances_csv=snakemake.output.utterances,
        alignments_txt=snakemake.output.alignments,
        threads=snakemake.threads,
        word_lm=snakemake.input.get("word_lm"),
        eval_filter=evaluation["filter"],
    )
    archived = archive_eval_summary(summary, snakemake.params.archive)
    s.add_details("archived", str(archived))

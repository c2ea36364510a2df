"""Snakemake adapter of rule plan_run -> asrflow.recipe.plan.write_plan."""

from asrflow.recipe.plan import write_plan
from asrflow.workflow import step

with step(snakemake):
    write_plan(
        snakemake.wildcards.run,
        [str(snakemake.input[k]) for k in sorted(snakemake.input.keys()) if k.startswith("train_")],
        snakemake.output.plan,
        normalization=snakemake.params.normalization,
        synthetic=snakemake.params.plan["synthetic"],
        explicit=snakemake.params.plan["explicit"],
        recipe=snakemake.params.plan["recipe"],
        inherited=snakemake.params.plan.get("inherited", ()),
        lineage=snakemake.params.plan.get("lineage"),
        parent_summary=snakemake.input.get("parent_summary"),
    )

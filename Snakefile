# asrflow: speech corpus -> chosen, verified ASR model.
# This file is a table of contents; each stage lives in rules/<stage>.smk, each step's logic in
# src/asrflow/. Outputs go under results/, logs under logs/.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/tokenizer.smk"
include: "rules/train.smk"
include: "rules/export.smk"
include: "rules/evaluate.smk"
include: "rules/select.smk"
include: "rules/report.smk"


# Jobs that only read small JSON/CSV files run on the submitting host, not as cluster jobs.
localrules:
    all,
    plan_run,
    word_lm,
    select_model,
    publish_selected,
    init_tokenizer,
    plot_learning_curves,
    plot_slices,
    report,
    plot_differences,


rule all:
    default_target: True
    input:
        all_targets(),

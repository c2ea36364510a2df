# Judging the exported artifacts: each artifact on each eval set in a fresh process (bf16 weights,
# no autocast), with the word LM the lexicon decoding mode uses. Every evaluation summary is also
# copied into the eval archive (layout.eval_archive), which the report reads for earlier revisions.


rule evaluate:
    input:
        unpack(eval_inputs),
    output:
        summary=layout.eval_file("{run}", "{artifact}", "{eval_set}", "summary.json"),
        utterances=layout.eval_file(
            "{run}", "{artifact}", "{eval_set}", "utterances.csv"
        ),
        alignments=layout.eval_file(
            "{run}", "{artifact}", "{eval_set}", "alignments.txt"
        ),
        record=layout.prov(
            layout.eval_file("{run}", "{artifact}", "{eval_set}", "summary.json")
        ),
    log:
        layout.log("evaluate", "{run}", "{artifact}", "{eval_set}"),
    benchmark:
        layout.benchmark("evaluate", "{run}", "{artifact}", "{eval_set}")
    conda:
        "../envs/asrflow.yaml"
    threads: eval_threads
    resources:
        gpu=config["evaluation"]["resources"]["devices"],
        cpus_per_gpu=config["evaluation"]["resources"]["cpus_per_device"],
        mem_mb=config["evaluation"]["resources"]["mem_mb"],
        runtime=eval_runtime,
    params:
        evaluation=runs.eval_params(config),
        slice_fields=eval_slice_fields,
        archive=layout.eval_archive(),
        decodes=layout.shared_decodes(),
    script:
        "../scripts/evaluate.py"


rule word_lm:
    input:
        train=run_train_splits,
        # decoding mode auto: the run's dev split tells whether its vocabulary is closed
        dev=word_lm_dev,
    output:
        counts=layout.word_lm_file("{run}"),
        record=layout.prov(layout.word_lm_file("{run}")),
    log:
        layout.log("word_lm", "{run}"),
    benchmark:
        layout.benchmark("word_lm", "{run}")
    conda:
        "../envs/asrflow.yaml"
    params:
        normalization=config["text_normalization"],
    script:
        "../scripts/word_lm.py"

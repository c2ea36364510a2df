# Making the artifacts: average each criterion's top-k checkpoints, export every artifact as a
# package ESPnet's Speech2Text loads (baseline of a fine-tuning run, last, best per criterion,
# averages).


rule average_checkpoints:
    input:
        summary=layout.run_file("{run}", "train", "summary.json"),
        artifacts=layout.run_file("{run}", "train", "artifacts"),
    output:
        weights=layout.average_file("{run}", "{average}"),
        record=layout.prov(layout.average_file("{run}", "{average}")),
    log:
        layout.log("average_checkpoints", "{run}", "{average}"),
    benchmark:
        layout.benchmark("average_checkpoints", "{run}", "{average}")
    conda:
        "../envs/asrflow.yaml"
    params:
        criterion=average_criterion,
    script:
        "../scripts/average_checkpoints.py"


rule export_artifact:
    input:
        unpack(export_inputs),
    output:
        package=directory(layout.export_dir("{run}", "{artifact}")),
        record=layout.prov(layout.export_dir("{run}", "{artifact}")),
    log:
        layout.log("export_artifact", "{run}", "{artifact}"),
    benchmark:
        layout.benchmark("export_artifact", "{run}", "{artifact}")
    conda:
        "../envs/asrflow.yaml"
    params:
        init_model=lookup(dpath="runs/{run}/init/model", within=config, default=None),
    script:
        "../scripts/export_artifact.py"

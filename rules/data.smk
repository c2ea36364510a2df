# Data half of the DAG: (synthesize) -> import -> (holdout) -> validate (gate) -> filter.
# import runs once per split, so a change to one split's manifest re-imports only that split;
# validate and holdout are checkpoints, so after they run Snakemake re-evaluates what depends on
# them and skips every split whose cuts came out byte-identical (see docs/provenance.md).


rule synthesize_corpus:
    output:
        train=layout.synthetic_manifest("{corpus}", "train"),
        dev=layout.synthetic_manifest("{corpus}", "dev"),
        test=layout.synthetic_manifest("{corpus}", "test"),
        audio=directory(layout.synthetic_audio("{corpus}")),
        record=layout.synthetic_record("{corpus}"),
    log:
        layout.log("synthesize_corpus", "{corpus}"),
    benchmark:
        layout.benchmark("synthesize_corpus", "{corpus}")
    conda:
        "../envs/asrflow.yaml"
    params:
        synthetic=lookup(dpath="corpora/{corpus}/synthetic", within=config),
    script:
        "../scripts/synthesize_corpus.py"


rule import_manifest:
    input:
        manifest=source_manifest,
        audio_state=audio_state,
    output:
        cuts=layout.imported("{corpus}", "{split}"),
        record=layout.prov(layout.imported("{corpus}", "{split}")),
    log:
        layout.log("import_manifest", "{corpus}", "{split}"),
    benchmark:
        layout.benchmark("import_manifest", "{corpus}", "{split}")
    conda:
        "../envs/asrflow.yaml"
    threads: 4
    params:
        format=import_format,
        # a Kaldi data dir is read at this rate; other formats take it from each file's header
        sampling_rate=lookup(
            dpath="corpora/{corpus}/sampling_rate", within=config, default=16000
        ),
    script:
        "../scripts/import_manifest.py"


checkpoint holdout_split:
    input:
        cuts=layout.imported("{corpus}", layout.ALL),
    output:
        splits=directory(layout.holdout_dir("{corpus}")),
        record=layout.prov(layout.holdout_dir("{corpus}")),
    log:
        layout.log("holdout_split", "{corpus}"),
    benchmark:
        layout.benchmark("holdout_split", "{corpus}")
    conda:
        "../envs/asrflow.yaml"
    params:
        holdout=lookup(dpath="corpora/{corpus}/holdout", within=config),
    script:
        "../scripts/holdout_split.py"


checkpoint validate_corpus:
    input:
        unpack(split_cuts),
    output:
        cuts=directory(layout.validated_dir("{corpus}")),
        report=layout.validation_report("{corpus}", "json"),
        text=report(
            layout.validation_report("{corpus}", "txt"),
            caption="../report/validation.rst",
            category="Data",
        ),
        record=layout.prov(layout.validation_report("{corpus}", "json")),
    log:
        layout.log("validate_corpus", "{corpus}"),
    benchmark:
        layout.benchmark("validate_corpus", "{corpus}")
    conda:
        "../envs/asrflow.yaml"
    threads: 4
    params:
        validation=lookup(dpath="corpora/{corpus}/validation", within=config),
        normalization=config["text_normalization"],
        sampling_rate=lookup(
            dpath="corpora/{corpus}/sampling_rate", within=config, default=None
        ),
        model_rates=lambda w: runs.frontend_rates(config, w.corpus),
    script:
        "../scripts/validate_corpus.py"


rule filter_split:
    input:
        cuts=validated_cuts,
    output:
        cuts=layout.filtered("{corpus}", "{split}"),
        report=layout.filter_report("{corpus}", "{split}", "json"),
        text=report(
            layout.filter_report("{corpus}", "{split}", "txt"),
            caption="../report/filter.rst",
            category="Data",
        ),
        record=layout.prov(layout.filtered("{corpus}", "{split}")),
    log:
        layout.log("filter_split", "{corpus}", "{split}"),
    benchmark:
        layout.benchmark("filter_split", "{corpus}", "{split}")
    conda:
        "../envs/asrflow.yaml"
    params:
        filter=lookup(dpath="corpora/{corpus}/filter", within=config),
        slice_fields=lookup(dpath="corpora/{corpus}/slice_fields", within=config),
        normalization=config["text_normalization"],
    script:
        "../scripts/filter_split.py"


# Only for corpora with `shards:` (off by default): training then reads the train split's audio
# from the shards; the filtered manifest and the original audio stay as they are.
rule shard_split:
    input:
        cuts=split_to_shard,
    output:
        shards=directory(layout.shards("{corpus}", "{split}")),
        record=layout.prov(layout.shards("{corpus}", "{split}")),
    log:
        layout.log("shard_split", "{corpus}", "{split}"),
    benchmark:
        layout.benchmark("shard_split", "{corpus}", "{split}")
    conda:
        "../envs/asrflow.yaml"
    params:
        shards=lookup(dpath="corpora/{corpus}/shards", within=config),
    script:
        "../scripts/shard_split.py"

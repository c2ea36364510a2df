# Tokenizer: SentencePiece trained on the filtered train split of one corpus only.


rule train_tokenizer:
    input:
        cuts=tokenizer_train_cuts,
    output:
        model=layout.tokenizer_file("{tokenizer}", "bpe.model"),
        tokens=layout.tokenizer_file("{tokenizer}", "tokens.txt"),
        summary=layout.tokenizer_file("{tokenizer}", "summary.json"),
        record=layout.prov(layout.tokenizer_file("{tokenizer}", "bpe.model")),
    log:
        layout.log("train_tokenizer", "{tokenizer}"),
    benchmark:
        layout.benchmark("train_tokenizer", "{tokenizer}")
    conda:
        "../envs/asrflow.yaml"
    params:
        tokenizer=tokenizer_settings,
        normalization=config["text_normalization"],
    script:
        "../scripts/train_tokenizer.py"


# tokenizer: init (the default of a fine-tuning run): the starting model's own tokenizer, and
# the run's text it cannot spell, per split (asrflow.export.package_tokenizer)
rule init_tokenizer:
    input:
        unpack(init_tokenizer_inputs),
    output:
        model=layout.run_file("{run}", "tokenizer", "bpe.model"),
        tokens=layout.run_file("{run}", "tokenizer", "tokens.txt"),
        summary=layout.run_file("{run}", "tokenizer", "summary.json"),
        record=layout.prov(layout.run_file("{run}", "tokenizer", "bpe.model")),
    log:
        layout.log("init_tokenizer", "{run}"),
    conda:
        "../envs/asrflow.yaml"
    params:
        normalization=config["text_normalization"],
    script:
        "../scripts/init_tokenizer.py"

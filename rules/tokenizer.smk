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

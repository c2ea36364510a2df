# Tokenizer: SentencePiece trained on the filtered train split of one corpus only.


rule train_tokenizer:
    input:
        cuts=tokenizer_train_cuts,
    output:
        model=layout.tokenizer_dir("{tokenizer}") + "/bpe.model",
        tokens=layout.tokenizer_dir("{tokenizer}") + "/tokens.txt",
        summary=layout.tokenizer_dir("{tokenizer}") + "/summary.json",
        record=layout.prov(layout.tokenizer_dir("{tokenizer}") + "/bpe.model"),
    params:
        tokenizer=tokenizer_settings,
        normalization=config["text_normalization"],
    log:
        layout.log("train_tokenizer", "{tokenizer}"),
    benchmark:
        layout.benchmark("train_tokenizer", "{tokenizer}")
    script:
        "../scripts/train_tokenizer.py"

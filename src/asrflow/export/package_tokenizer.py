"""The tokenizer a starting model ships, taken for a fine-tuning run: ``tokenizer: init``.

Below some tens of hours of target audio a fine-tuning run keeps the pretrained model's tokenizer
(its output layer is trained for those tokens; a new vocabulary starts the output layer from
scratch). :func:`take_package_tokenizer` copies the SentencePiece model and token list of the
run's ``init`` model into the run's own tokenizer files (``results/runs/<run>/tokenizer/``),
after checking that they belong together, and reports, per split of the run's data, the text
that tokenizer cannot spell: words it writes with ``<unk>`` and the characters that cause them.
That is the failure a regenerated or mismatched tokenizer produces silently (a model trained to
emit ``<unk>``, or WER near 100 % after fine-tuning), found before any training.

Where the files come from: an asrflow package has ``bpe.model`` and ``tokens.txt`` beside its
``config.yaml``; an ESPnet experiment or model-zoo directory has the token list in its
``config.yaml`` (``token_list``) and the SentencePiece model at the config's ``bpemodel``
(relative to the working directory, as ESPnet's recipes write it, or to the config's directory).
"""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from asrflow.data.cuts import load_cuts, text
from asrflow.errors import AsrflowError
from asrflow.export.find import find_config, read_token_list
from asrflow.hashing import sha256_file
from asrflow.io import atomic_output, write_text
from asrflow.text import TextNormalization
from asrflow.tokenizer import token_list
from asrflow.tokens import TokenEncoder, first_index
from asrflow.types import Pathlike

log = logging.getLogger(__name__)

EXAMPLES = 5
"""Cut ids (and unknown words) listed per split in the summary."""


def package_tokenizer_files(model: Pathlike) -> tuple[Path, Path, list[str]]:
    """``(config.yaml, SentencePiece model, token list)`` of the starting model ``model``; an
    error saying what to do when it has no tokenizer or its two halves disagree."""
    config = find_config(model)
    if config is None:
        raise AsrflowError(
            f"tokenizer: init: {model} has no config.yaml, so it carries no tokenizer; name a "
            "tokenizer in runs.<run>.tokenizer and exclude the output layers (init.exclude: "
            "[ctc.*, decoder.*])"
        )
    tokens = read_token_list(config)
    bpe = _find_bpe_model(config)
    ours = token_list(bpe)
    if ours != tokens:
        first = first_index(ours, tokens)
        raise AsrflowError(
            f"tokenizer: init: {bpe} ({len(ours)} tokens) does not belong to the token_list of "
            f"{config} ({len(tokens)} tokens; they first differ at token ID {first}); point the "
            "config's bpemodel at the model it was trained with"
        )
    return config, bpe, tokens


def _find_bpe_model(config: Path) -> Path:
    beside = config.parent / "bpe.model"
    if beside.is_file():
        return beside
    data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    named = data.get("bpemodel")
    if not named:
        raise AsrflowError(
            f"tokenizer: init: {config} names no bpemodel (token_type "
            f"{data.get('token_type')!r}) and there is no bpe.model beside it; asrflow's runs "
            "tokenize with SentencePiece: name a tokenizer in runs.<run>.tokenizer and exclude "
            "the output layers (init.exclude: [ctc.*, decoder.*])"
        )
    for candidate in (Path(named), config.parent / named):
        if candidate.is_file():
            return candidate
    raise AsrflowError(
        f"tokenizer: init: {config}: bpemodel {named!r} exists neither as given nor beside the "
        "config; copy the SentencePiece model to bpe.model beside config.yaml"
    )


def take_package_tokenizer(
    model: Pathlike,
    out_model: Pathlike,
    out_tokens: Pathlike,
    cuts: Mapping[str, Pathlike],
    normalization: TextNormalization,
) -> dict[str, Any]:
    """Copy ``model``'s tokenizer to ``out_model`` and ``out_tokens`` and return the summary:
    where it came from (paths, SHA-256, number of tokens) and ``coverage`` of each split of
    ``cuts`` (:func:`coverage`). Splits with text the tokenizer cannot spell are logged."""
    config, bpe, tokens = package_tokenizer_files(model)
    with atomic_output(out_model) as tmp:
        shutil.copyfile(bpe, tmp)
    write_text(out_tokens, "".join(f"{t}\n" for t in tokens))
    encoder = TokenEncoder(out_model, out_tokens, normalization)
    report = {split: coverage(encoder, path) for split, path in cuts.items()}
    for split, c in report.items():
        if c["utterances_with_unknown"]:
            log.warning(
                "%s: %d of %d utterances have text the starting model's tokenizer writes as "
                "<unk> (characters %s; e.g. %s): the model cannot learn to write them; fix the "
                "transcripts, add text_normalization.replacements, or train a new tokenizer "
                "(and exclude the output layers)",
                split,
                c["utterances_with_unknown"],
                c["utterances"],
                "".join(c["unknown_characters"]) or "none alone",
                ", ".join(c["examples"]),
            )
    return {
        "source": {
            "model": str(model),
            "config": str(config),
            "bpe_model": str(bpe),
            "bpe_model_sha256": sha256_file(bpe),
            "tokens": len(tokens),
        },
        "coverage": report,
    }


def coverage(encoder: TokenEncoder, cuts_path: Pathlike) -> dict[str, Any]:
    """What ``encoder`` cannot spell in a split: ``utterances``,
    ``utterances_with_unknown``, ``unknown_tokens`` (``<unk>`` tokens in all), the most frequent
    ``unknown_words`` and every ``unknown_characters`` (characters the tokenizer alone writes as
    ``<unk>``), and the first :data:`EXAMPLES` cut ids with any."""
    words: Counter[str] = Counter()
    n = with_unknown = unknown_tokens = 0
    examples: list[str] = []
    for cut in load_cuts(cuts_path):
        n += 1
        unknown = encoder.unknown_words(text(cut))
        if not unknown:
            continue
        with_unknown += 1
        unknown_tokens += sum(k for _, k in unknown)
        words.update(w for w, _ in unknown)
        if len(examples) < EXAMPLES:
            examples.append(cut.id)
    characters = sorted({c for w in words for c in w if encoder.unknown_words(c)})
    return {
        "utterances": n,
        "utterances_with_unknown": with_unknown,
        "unknown_tokens": unknown_tokens,
        "unknown_words": dict(words.most_common(EXAMPLES)),
        "unknown_characters": characters,
        "examples": examples,
    }

"""Before a run trains: :mod:`~asrflow.train.preflight.audit` (the batches the sampler will feed,
token counts, padding), :mod:`~asrflow.train.preflight.unk` (target tokens the tokenizer cannot
spell, per split) and :mod:`~asrflow.train.preflight.smoke` (a few steps, a validation and an
export decoded by ESPnet, in a minute). Importing the package imports none of them: the audit job
stays free of Lightning and ESPnet.
"""

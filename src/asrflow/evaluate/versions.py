"""The decoder's version, torch-free: the DAG reads it (rule ``evaluate``'s params) while it is
built, without importing the decoder (:mod:`asrflow.evaluate.decode`)."""

DECODER_VERSION = 2
"""The version of how transcripts are computed from a package and its audio. Bump it with every
change that can change a transcript: it is part of
:meth:`~asrflow.evaluate.decode.Decoding.sha256` (results of two decoders are archived side by
side, never taken for one another) and a param of rule ``evaluate``, so a bump reruns every
evaluation. 2: the frontend runs on each utterance alone
(:class:`~asrflow.evaluate.decode.UtteranceFrontend`); 1 (never recorded): on the padded batch.
"""

"""What the training loop is fed: batches of padded audio and token IDs.

:mod:`~asrflow.train.batches.loader` reads a run's train cuts (Lhotse manifests: the bucketing
or length-sorted sampler, the dataset, weighted mixing of corpora, speed perturbation),
:mod:`~asrflow.train.batches.shard_stream` reads Lhotse Shar shards instead (dealt to ranks and
workers), :mod:`~asrflow.train.batches.sorted_batches` packs ESPnet-style length-sorted batches,
:mod:`~asrflow.train.batches.workers` starts loader workers from a fork server and
:mod:`~asrflow.train.batches.vtlp` warps the frontend's frequency axis (VTLP).
"""

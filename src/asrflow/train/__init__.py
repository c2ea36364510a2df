"""Training half of the workflow, one package per concern, each importing only those after it
(import-linter's layers contract on ``asrflow.train``):

- :mod:`~asrflow.train.preflight`: what runs before training (the batch audit, target tokens the
  tokenizer cannot spell, the smoke run);
- :mod:`~asrflow.train.run`: one run from start to finish (started on one node or by ``srun`` on
  several, its work directory, how it ended);
- :mod:`~asrflow.train.loop`: the Lightning loop (model, module, loss, schedule, one callback per
  concern, the Trainer's parts);
- :mod:`~asrflow.train.batches`: what the loop is fed (samplers, loaders, shards, VTLP), and
  :mod:`~asrflow.train.init`: fine-tuning's start (weights, freezing, LoRA adapters);
- :mod:`~asrflow.train.cluster`: where a process runs (its rank, the hardware it really has);
- :mod:`~asrflow.train.spec`: what a run reads (torch-free: the DAG writes it, every part reads it).
"""

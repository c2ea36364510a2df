"""One training run from start to finish: :mod:`~asrflow.train.run.runner` (what the ``train``
rule calls on one node), :mod:`~asrflow.train.run.launch` (one ``srun`` task per device for runs
on several nodes), :mod:`~asrflow.train.run.workdir` (whose work directory it resumes from) and
:mod:`~asrflow.train.run.outcome` (the summary and outputs of how it ended).
"""

"""The training loop on Lightning: :mod:`~asrflow.train.loop.model` builds the ESPnet model,
:mod:`~asrflow.train.loop.module` takes the step (with :mod:`~asrflow.train.loop.loss` and
:mod:`~asrflow.train.loop.schedule`) and scores dev (:mod:`~asrflow.train.loop.dev_scoring`);
one callback per concern (:mod:`~asrflow.train.loop.diagnostics`,
:mod:`~asrflow.train.loop.loggers`, :mod:`~asrflow.train.loop.progress`,
:mod:`~asrflow.train.loop.resume`, :mod:`~asrflow.train.loop.failures`: the non-finite guard and
how a run ends other than by finishing); :mod:`~asrflow.train.loop.parts` assembles them and
:mod:`~asrflow.train.loop.trainer` turns the recipe into the Trainer's arguments.
"""

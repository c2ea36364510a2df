"""A fine-tuning run's start (``runs.<run>.init``): :mod:`~asrflow.train.init.weights` loads the
start weights (a package, an ESPnet experiment, a checkpoint) and
:mod:`~asrflow.train.init.adapters` freezes parameters and adds LoRA adapters after that.
"""

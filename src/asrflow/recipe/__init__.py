"""Recipes that follow the corpus: ``recipe: auto``.

A run with ``recipe: auto`` trains the built-in base recipe (:data:`asrflow.recipe.plan.AUTO_BASE`,
``auto.yaml`` beside this file) with the values a *plan* derives from its train split: the
frontend at the corpus's sampling rate, augmentation for real speech, the update budget, warmup,
peak learning rate and model size from the hours. The statistics are
:class:`~asrflow.recipe.stats.CorpusStats`, each rule a small pure function of them in
:mod:`asrflow.recipe.rules` (its docstring says what it rests on), and the plan
(:mod:`asrflow.recipe.plan`) is written by rule ``plan_run`` with every value's reason, before
anything trains (``asrflow plan RUN`` prints it). A key the run's ``overrides`` set always wins.

Torch-free: the DAG is built with it.
"""

"""The training recipe: what a run trains, as one typed object.

A recipe (``config/recipes/<name>.yaml``, or ``recipe: auto``) is ESPnet's model keys plus
asrflow's training-loop sections. :mod:`~asrflow.recipe.load` reads a recipe file with a run's
overrides into a :class:`~asrflow.recipe.sections.Recipe` (its sections are dataclasses there,
``batching`` in :mod:`~asrflow.recipe.batching`), checked by :mod:`~asrflow.recipe.checks`;
:mod:`~asrflow.recipe.mappings` holds the helpers on nested recipe data.

``recipe: auto`` trains the built-in base recipe (:data:`asrflow.recipe.plan.AUTO_BASE`,
``auto.yaml`` beside this file) with the values a *plan* derives from its train split: the
frontend at the corpus's sampling rate, augmentation for real speech, the update budget, warmup,
peak learning rate and model size from the hours. The statistics are
:class:`~asrflow.recipe.stats.CorpusStats`, each rule a small pure function of them in
:mod:`asrflow.recipe.rules` (its docstring says what it rests on), and the plan
(:mod:`asrflow.recipe.plan`) is written by rule ``plan_run`` with every value's reason, before
anything trains (``asrflow plan RUN`` prints it). A key the run's ``overrides`` set always wins.
A fine-tuning run takes its model keys from the starting package (:mod:`asrflow.recipe.inherit`).

Torch-free: the DAG is built with it.
"""

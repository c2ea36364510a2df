"""Choosing the model of a run: checkpoint averaging and selection."""

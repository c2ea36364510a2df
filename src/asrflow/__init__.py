"""asrflow: a Snakemake workflow that takes a speech corpus to a chosen, verified ASR model."""

__version__ = "0.1.0"

"""Training half of the workflow: token encoding, Lhotse data loading, batch audit, models."""

"""Data half of the workflow: importing, splitting, validating and filtering corpora."""

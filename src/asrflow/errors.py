"""Errors caused by user input or configuration.

Raise :class:`AsrflowError` (or a subclass) when the *user* must act: the message must say what
is wrong, where (file, line, item) and what to do about it. The workflow adapter
(:mod:`asrflow.workflow`) logs these as a plain message without a traceback; any other exception
is treated as a bug and logged with its traceback.

Example::

    raise AsrflowError(
        "config/config.yaml, line 12: 'sample_rate' must be a positive integer, got -1; "
        "set it to the corpus rate (e.g. 16000)"
    )
"""


class AsrflowError(Exception):
    """An error in user input or configuration, with a message that says how to fix it."""


class ValidationFailed(AsrflowError):
    """Input data or configuration failed validation."""

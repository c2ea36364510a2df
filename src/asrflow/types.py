"""Named types for units and paths, used across the package (as in Lhotse's ``lhotse.utils``)."""

import os
from typing import TypeAlias

Pathlike: TypeAlias = str | os.PathLike[str]
"""Anything ``pathlib.Path`` accepts."""

Seconds: TypeAlias = float
"""A duration or time offset in seconds."""

Hz: TypeAlias = int
"""A sampling rate in samples per second."""

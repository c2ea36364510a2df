"""Audio-less cuts: for tests of code that reads only a cut's duration, text and custom fields
(samplers, the batch audit, the data filter, tokenizers), never its audio."""

from __future__ import annotations

from typing import Any

from lhotse import MonoCut

from asrflow.data.cuts import make_cut

SAMPLE_RATE = 16000


def audio_less_cut(
    cid: str, duration: float = 1.0, text: str = "a", *, speaker: str | None = None, **custom: Any
) -> MonoCut:
    """A cut as asrflow's importers make it (:func:`asrflow.data.cuts.make_cut`), ``duration``
    seconds at 16 kHz, whose audio file ``/nonexistent/<cid>.wav`` does not exist; ``custom``:
    its custom fields (``origin``, slices, ...)."""
    return make_cut(
        utt_id=cid,
        audio=f"/nonexistent/{cid}.wav",
        sampling_rate=SAMPLE_RATE,
        num_samples=round(duration * SAMPLE_RATE),
        duration=duration,
        text=text,
        speaker=speaker,
        custom=custom or None,
    )

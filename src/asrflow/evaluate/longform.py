"""Long-form decoding: an utterance longer than ``evaluation.window_seconds`` is decoded in
overlapping windows, and the windows' CTC frames are stitched at the middle of each overlap.

A conformer's self-attention costs memory and time quadratic in the utterance's length, so a
10-minute recording does not go through it in one piece. As in NeMo's buffered CTC inference,
the recording is cut into windows of ``window_seconds`` that overlap by ``overlap_seconds``;
each window is encoded alone (its features computed on its own samples, as every utterance's
are), and of its CTC frames (argmax IDs for greedy decoding, log-probabilities for the lexicon
search) only those whose centre lies between the middles of its overlaps with its neighbours
are kept: every kept frame has at least half an overlap of audio context on both sides. The
kept frames, concatenated, are decoded as one utterance's (repeats collapsed across the join,
the word search run over the whole recording), so a word cut by a window's edge is read in the
window where it is whole. Memory is bounded by the windows encoded at once
(``batch_seconds`` of audio), not by the recording's length.

Example::

    plan = window_plan(n_samples=160_000 * 6, window=480_000, overlap=64_000)
    frames = stitch(plan, [frames_of(audio[w.start:w.end]) for w in plan])
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from asrflow.errors import AsrflowError


@dataclass(frozen=True)
class Window:
    """One window of a long recording, in samples: ``start:end`` is encoded, the frames whose
    centre lies in ``keep_start:keep_end`` are kept."""

    start: int
    end: int
    keep_start: int
    keep_end: int

    @property
    def length(self) -> int:
        return self.end - self.start


def window_plan(n_samples: int, window: int, overlap: int) -> list[Window]:
    """Windows of ``window`` samples every ``window - overlap`` samples; the last one ends at
    the recording's end (so it is whole too, overlapping its neighbour by more). The kept spans
    tile ``0:n_samples`` exactly.

    >>> [(w.start, w.end, w.keep_start, w.keep_end) for w in window_plan(25, 10, 4)]
    [(0, 10, 0, 8), (6, 16, 8, 14), (12, 22, 14, 18), (15, 25, 18, 25)]
    >>> window_plan(8, 10, 4)
    [Window(start=0, end=8, keep_start=0, keep_end=8)]
    """
    if window <= 0 or not 0 <= overlap < window:
        raise AsrflowError(
            f"long-form windows need 0 <= overlap < window (got window {window}, overlap "
            f"{overlap} samples): check evaluation.window_seconds and window_overlap_seconds"
        )
    if n_samples <= window:
        return [Window(0, n_samples, 0, n_samples)]
    stride = window - overlap
    starts = [*range(0, n_samples - window, stride), n_samples - window]
    spans = [(s, s + window) for s in starts]
    cuts = [(spans[i][1] + spans[i + 1][0]) // 2 for i in range(len(spans) - 1)]
    bounds = [0, *cuts, n_samples]
    return [Window(s, e, bounds[i], bounds[i + 1]) for i, (s, e) in enumerate(spans)]


def kept_frames(window: Window, n_frames: int) -> slice:
    """The frames of ``window``'s encoder output (``n_frames`` of them, evenly spread over its
    samples) whose centre lies in its kept span."""
    if n_frames == 0:
        return slice(0, 0)
    step = window.length / n_frames

    def first_at_or_after(sample: int) -> int:
        # frame j's centre is start + (j + 0.5) * step
        j = (sample - window.start) / step - 0.5
        return max(0, min(n_frames, math.ceil(j)))

    return slice(first_at_or_after(window.keep_start), first_at_or_after(window.keep_end))


def stitch(plan: Sequence[Window], outputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """One recording's frames from its windows' (``outputs[i]``: window ``plan[i]``'s frames,
    time first), each window's kept frames in order."""
    if len(plan) != len(outputs):
        raise ValueError(f"{len(plan)} windows but {len(outputs)} outputs")
    return torch.cat([out[kept_frames(w, len(out))] for w, out in zip(plan, outputs, strict=True)])


def window_groups(plan: Sequence[Window], max_samples: int) -> Iterator[list[Window]]:
    """``plan``'s windows in groups of at most ``max_samples`` samples (at least one window a
    group): what is encoded at once, so memory does not grow with the recording."""
    group: list[Window] = []
    total = 0
    for w in plan:
        if group and total + w.length > max_samples:
            yield group
            group, total = [], 0
        group.append(w)
        total += w.length
    if group:
        yield group

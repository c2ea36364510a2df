"""Group holdout: make train/dev/test splits so that no group (speaker, session, ...) spans two.

Groups are shuffled with a seeded RNG and dealt to the held-out splits until each holds at
least its fraction of the corpus's audio duration; all remaining groups go to ``train``. The
same cuts, key, fractions and seed always give the same split.

>>> splits = group_holdout(cuts, by="speaker", fractions={"dev": 0.1, "test": 0.1}, seed=0)
... # doctest: +SKIP
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence

from lhotse.cut import Cut

from asrflow.data.cuts import field, origin
from asrflow.errors import AsrflowError

log = logging.getLogger(__name__)

TRAIN = "train"


def group_holdout(
    cuts: Sequence[Cut], by: str, fractions: Mapping[str, float], seed: int
) -> dict[str, list[Cut]]:
    """Split ``cuts`` into ``train`` plus one split per key of ``fractions`` by group ``by``."""
    if TRAIN in fractions:
        raise AsrflowError("holdout.fractions names the held-out splits only; train gets the rest")
    if any(f <= 0 for f in fractions.values()) or sum(fractions.values()) >= 1:
        raise AsrflowError(
            f"holdout.fractions must be positive and sum to less than 1, got {dict(fractions)}"
        )
    groups: dict[str, list[Cut]] = defaultdict(list)
    missing = []
    for cut in cuts:
        key = field(cut, by)
        if key is None or key == "":
            missing.append(origin(cut))
        else:
            groups[str(key)].append(cut)
    if missing:
        shown = ", ".join(missing[:5])
        raise AsrflowError(
            f"holdout by {by!r}: {len(missing)} utterance(s) have no {by!r} field (e.g. {shown}); "
            f"add it to every manifest line or choose another holdout key"
        )
    if len(groups) < len(fractions) + 1:
        raise AsrflowError(
            f"holdout by {by!r}: only {len(groups)} group(s), need at least {len(fractions) + 1} "
            f"to give train and {', '.join(fractions)} one each"
        )
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    total = sum(c.duration for c in cuts)
    splits: dict[str, list[Cut]] = {name: [] for name in [*fractions, TRAIN]}
    pending = list(order)
    for name, fraction in fractions.items():
        held = 0.0
        # always leave at least one group for train and for each later split
        later = len(fractions) - list(fractions).index(name)
        while pending and len(pending) > later and (held < fraction * total or not splits[name]):
            group = pending.pop(0)
            splits[name].extend(groups[group])
            held += sum(c.duration for c in groups[group])
    for group in pending:
        splits[TRAIN].extend(groups[group])
    for name, members in splits.items():
        log.info(
            "holdout by %s: %s gets %d utterances (%.1f%% of audio)",
            by,
            name,
            len(members),
            100 * sum(c.duration for c in members) / total,
        )
    return splits

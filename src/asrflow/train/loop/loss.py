"""Loss normalization: per target token instead of ESPnet2's per utterance.

``ESPnetASRModel.forward`` returns its loss divided by the number of utterances in the batch:
the CTC branch is ``loss.sum() / batch_size`` (``CTC.loss_fn`` with ``reduce=True``), and the
attention branch's ``LabelSmoothingLoss`` divides by the batch size unless
``model_conf.length_normalized_loss`` is true. The gradient therefore grows with the number of
tokens per utterance: with duration-based batches (Lhotse's ``max_duration``), a batch of one
long utterance weighs each of its tokens several times more than a batch of many short ones.

``per_token`` turns that back into the summed loss and divides by the number of target tokens.
Under DDP each rank must divide by the *global* token count (:func:`global_token_count`) and
multiply by the world size, because DDP averages gradients over ranks:
``mean_r(world_size * sum_r / G) = (sum over ranks) / G``, the single-process per-token loss of
the union of the ranks' batches.

Assumptions: ESPnet's CTC is ``ctc_type: builtin`` (``brctc`` divides by the number of
*valid* utterances instead) and ``length_normalized_loss`` is false (else the attention branch is
already per token: :func:`asrflow.recipe.checks.check_recipe` refuses that combination). The
attention branch also scores one ``<sos/eos>`` per utterance, which the target token count
(``text_lengths.sum()``) leaves out: a small bias.

Not covered: Lightning divides each accumulated batch's loss by ``accumulate_grad_batches``, so
with accumulation an update is the *mean of per-batch per-token losses*, which weighs batches
equally rather than tokens. The value returned under DDP is scaled for the gradient; log the
local ``sum / tokens`` (or reduce sums and counts) rather than it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from asrflow.errors import AsrflowError
from asrflow.recipe.sections import NORMALIZATIONS


def per_token(
    loss_per_utt: torch.Tensor,
    num_utterances: int,
    num_tokens: int,
    world_size: int = 1,
    global_num_tokens: int | None = None,
) -> torch.Tensor:
    """ESPnet's per-utterance loss as total loss per target token (for the gradient).

    ``loss_per_utt`` is ESPnet's returned loss (sum over the batch / ``num_utterances``, the
    ``weight`` ESPnet returns beside it);
    ``num_tokens`` is the batch's target token count (``text_lengths.sum()``). Without DDP the
    result is ``sum / num_tokens``. Under DDP pass ``world_size`` and ``global_num_tokens`` (the
    sum of ``num_tokens`` over ranks); the result is ``sum * world_size / global_num_tokens``,
    so DDP's gradient average is ``d(global sum) / d(params) / global tokens``. A zero token
    count is treated as 1 (the loss is then the plain sum).
    """
    if num_utterances < 1 or num_tokens < 0 or world_size < 1:
        raise ValueError(
            f"need num_utterances >= 1, num_tokens >= 0, world_size >= 1; got "
            f"{num_utterances}, {num_tokens}, {world_size}"
        )
    local_sum = loss_per_utt * num_utterances
    if global_num_tokens is None:
        if world_size != 1:
            raise ValueError("world_size > 1 needs global_num_tokens (see global_token_count)")
        return local_sum / max(num_tokens, 1)
    if global_num_tokens < num_tokens:
        raise ValueError(
            f"global_num_tokens ({global_num_tokens}) < this rank's num_tokens ({num_tokens}); "
            "pass the sum over all ranks"
        )
    return local_sum * (world_size / max(global_num_tokens, 1))


def normalize_loss(
    mode: str,
    loss_per_utt: torch.Tensor,
    num_utterances: int,
    num_tokens: int,
    world_size: int = 1,
    global_num_tokens: int | None = None,
) -> torch.Tensor:
    """The loss to back-propagate for ``loss.normalization`` = ``token`` or ``utterance``.

    ``utterance`` returns ESPnet's loss unchanged (ESPnet's own behaviour; under DDP the ranks'
    per-utterance means are averaged).
    """
    if mode == "token":
        return per_token(loss_per_utt, num_utterances, num_tokens, world_size, global_num_tokens)
    if mode == "utterance":
        return loss_per_utt
    raise AsrflowError(
        f"loss.normalization must be one of {', '.join(NORMALIZATIONS)}, got {mode!r}"
    )


def global_token_count(num_tokens: int, device: torch.device | str) -> int:
    """Sum of ``num_tokens`` over all ranks (``all_reduce``), or ``num_tokens`` without DDP.

    Every rank must call it for every batch (it is a collective). ``device`` must suit the
    backend: a CUDA device for NCCL, the CPU for Gloo.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return int(num_tokens)
    count = torch.tensor([int(num_tokens)], dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.SUM)
    return int(count.item())

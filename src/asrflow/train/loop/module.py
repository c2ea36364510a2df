"""The Lightning module that trains an ESPnet2 ASR model.

ESPnet's ``ESPnetASRModel.forward`` returns its loss averaged over *utterances*, so the gradient
grows with tokens per utterance and a length-mixed batch swings it. By default the module turns
that into a loss per target token (:mod:`asrflow.train.loop.loss`, global token count under DDP).

A batch whose loss is NaN/inf is skipped (no backward, no update, on every rank together);
``diagnostics.max_consecutive_nonfinite`` such batches in a row stop the run with
:class:`~asrflow.train.loop.failures.TrainingDiverged`.

Under DDP each rank trains on its shard of the batches and validates its shard of the dev set;
validation sums (loss, errors, words) are reduced over the ranks and the dev transcripts gathered,
so rank 0 logs and writes the metrics of the whole dev set.

Each training step leaves its figures in :attr:`AsrModule.step_record` (a :class:`StepRecord`)
and each validation its transcripts and metrics in :attr:`AsrModule.validation`; the callbacks
that act on them are the run's, one per concern (assembled by
:func:`asrflow.train.loop.parts.build_trainer_parts`): the metrics row
(:class:`~asrflow.train.loop.loggers.MetricsRow`), loss spikes and decoded samples
(:class:`~asrflow.train.loop.diagnostics.DiagnosticsCallback`), exact resume
(:class:`~asrflow.train.loop.resume.ExactResume`) and the progress line
(:class:`~asrflow.train.loop.progress.LineProgress`). The module keeps the step, the gradient
clipping that measures the step's gradient norm, the optimizer and the validation step; what
a validation adds up, and the ``valid/*`` metrics made of it, are
:class:`~asrflow.train.loop.dev_scoring.DevTally`'s.

Each utterance's CTC loss per token comes from the training forward itself
(:class:`UtteranceLossTap`: no second forward, nothing that could change the weights).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from asrflow.recipe.load import scaled_lr
from asrflow.recipe.sections import Recipe
from asrflow.tokens import TokenEncoder, greedy_ctc
from asrflow.train.batches.shard_stream import FILLER, ShardLoader
from asrflow.train.cluster import check_sampler_rank
from asrflow.train.loop.dev_scoring import DevTally, dev_metrics
from asrflow.train.loop.failures import NonFiniteGuard
from asrflow.train.loop.loss import normalize_loss, per_token
from asrflow.train.loop.resume import SkippingSampler
from asrflow.train.loop.schedule import build_optimizer, build_scheduler

log = logging.getLogger(__name__)


class UtteranceLossTap:
    """Each utterance's CTC loss (summed over its tokens) from the forward that trains on it.

    ESPnet's ``builtin`` CTC computes ``torch.nn.CTCLoss(reduction="none")``, one loss per
    utterance, before it averages them; a forward hook on that module keeps its first output of
    a forward (the main CTC branch: intermediate-CTC layers come after it). Inactive for a model
    without such a module (another ``ctc_type``, no CTC branch): the diagnostics then judge the
    batch's loss.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.losses: torch.Tensor | None = None
        ctc_loss = getattr(getattr(model, "ctc", None), "ctc_loss", None)
        self.active = isinstance(ctc_loss, torch.nn.CTCLoss) and ctc_loss.reduction == "none"
        if self.active:
            ctc_loss.register_forward_hook(self._keep)

    def _keep(self, module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
        if self.losses is None:
            self.losses = output.detach()

    def take(self) -> torch.Tensor | None:
        """The kept losses (None if none), forgetting them."""
        losses, self.losses = self.losses, None
        return losses

    def per_token(self, text_lengths: torch.Tensor, num_utterances: int) -> list[float] | None:
        """The kept losses divided by each utterance's token count, or None."""
        losses = self.take()
        if losses is None or losses.numel() != num_utterances:
            return None
        lengths = text_lengths.to(losses.device).clamp(min=1)
        return (losses.float() / lengths).tolist()


@dataclass
class StepRecord:
    """What one training step measured, for the callbacks at its end (rank-local)."""

    step: int
    """``global_step`` at the step's start: the step loggers write the row at."""
    loss: torch.Tensor
    """The optimized loss (detached)."""
    loss_per_token: float
    num_tokens: int
    num_utterances: int
    audio_seconds: float
    padding_ratio: float
    ids: Sequence[str]
    utterance_losses: list[float] | None
    """Each utterance's CTC loss per token (:class:`UtteranceLossTap`), or None."""
    lr: float | None = None
    """The rate of this step's update (the scheduler steps before the row is logged)."""
    grad_norm: torch.Tensor | None = None
    """The total gradient norm before clipping (:meth:`AsrModule.configure_gradient_clipping`)."""


class AsrModule(L.LightningModule):
    """Trains ``model`` (an ``ESPnetASRModel``) with the recipe's loss, optimizer and schedule."""

    def __init__(
        self,
        model: torch.nn.Module,
        recipe: Recipe,
        encoder: TokenEncoder,
        references: Mapping[str, str],
        train_sampler: SkippingSampler | ShardLoader | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.recipe = recipe
        self.encoder = encoder
        self.references = dict(references)
        self._dev = DevTally(self.references)
        self.train_sampler = train_sampler
        self.nonfinite = NonFiniteGuard(recipe.diagnostics.max_consecutive_nonfinite)
        self.utterance_losses = UtteranceLossTap(model)
        self.step_record: StepRecord | None = None
        """The last training step's figures; None after a skipped or filler step."""
        self.step_loss: torch.Tensor | None = None
        """The loss optimized at the last step that trained (what the progress line shows)."""
        self.validation: tuple[dict[str, str], dict[str, float]] | None = None
        """The last validation's transcripts of the whole dev set (by utterance) and metrics."""

    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def setup(self, stage: str) -> None:
        if self._trainer is not None:
            check_sampler_rank(
                self.train_sampler, self.trainer.world_size, self.trainer.global_rank
            )

    # --- training ------------------------------------------------------------------------

    def forward(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict, torch.Tensor]:
        return self.model(
            batch["speech"], batch["speech_lengths"], batch["text"].clone(), batch["text_lengths"]
        )

    def _all_sum(self, values: list[int], device: torch.device) -> list[int]:
        """``values`` summed over the ranks (one all-reduce; unchanged without DDP)."""
        if self._world_size() == 1 or not (dist.is_available() and dist.is_initialized()):
            return list(values)
        t = torch.tensor(values, dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return [int(x) for x in t.tolist()]

    def _filler_step(self, loss_utt: torch.Tensor) -> torch.Tensor | None:
        """A step on a filler batch (:mod:`asrflow.train.batches.shard_stream`): the same
        collective as a real
        step with no tokens, then a loss of zero, so this rank adds no gradient to the update
        that the other ranks' real batches make (DDP still needs its backward)."""
        self.utterance_losses.take()
        _, nonfinite = self._all_sum([0, 0], loss_utt.device)
        if nonfinite:  # another rank's loss: every rank skips the update, and counts it
            self.nonfinite.observe(self.global_step, [])
            return None
        self.nonfinite.reset()
        return loss_utt.sum() * 0.0

    def training_step(self, batch: Mapping[str, Any], batch_idx: int) -> torch.Tensor | None:
        self.step_record = None
        self.utterance_losses.take()  # what a validation forward left
        loss_utt, _, _ = self(batch)
        if batch.get(FILLER):  # this rank has run out of shards; another has not
            return self._filler_step(loss_utt)
        num_utts, num_tokens = len(batch["ids"]), int(batch["num_tokens"])
        finite = bool(torch.isfinite(loss_utt.detach()).all())
        # one collective for both: the global token count and whether any rank's loss is bad
        global_tokens, nonfinite = self._all_sum([num_tokens, int(not finite)], loss_utt.device)
        if nonfinite:
            self.nonfinite.observe(self.global_step, batch["ids"])  # raises when diverged
            return None  # every rank skips this update together
        self.nonfinite.reset()
        mode = self.recipe.loss.normalization
        loss = normalize_loss(
            mode,
            loss_utt,
            num_utterances=num_utts,
            num_tokens=num_tokens,
            world_size=self._world_size(),
            global_num_tokens=global_tokens if mode == "token" else None,
        )
        self.step_loss = loss.detach()
        if self._trainer is not None and self.trainer.progress_bar_callback is not None:
            # the live bar reads only what was self.log'ged (~1 ms a step, so only for a bar)
            self.log("train/loss", loss, prog_bar=True, logger=False, batch_size=num_utts)
        optimizers = self.trainer.optimizers if self._trainer is not None else []
        self.step_record = StepRecord(
            step=self.global_step,
            loss=self.step_loss,
            loss_per_token=float(per_token(loss_utt.detach(), num_utts, num_tokens)),
            num_tokens=num_tokens,
            num_utterances=num_utts,
            audio_seconds=float(batch["audio_seconds"]),
            padding_ratio=float(batch["padding_ratio"]),
            ids=batch["ids"],
            utterance_losses=self.utterance_losses.per_token(batch["text_lengths"], num_utts),
            lr=optimizers[0].param_groups[0]["lr"] if optimizers else None,
        )
        return loss

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip as Lightning would (it calls this after accumulation, every optimizer step), and
        keep the total gradient norm before clipping in the step's record: by norm, the norm
        that clipping computes (once; it was computed twice when logged from a hook of its own)."""
        params = [
            p for p in self.trainer.precision_plugin.main_params(optimizer) if p.grad is not None
        ]
        if not params:  # nothing to clip or log
            return
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            total = torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        else:
            total = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type=2.0)
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        if self.step_record is not None:
            self.step_record.grad_norm = total

    def configure_optimizers(self) -> dict[str, Any]:
        # the parameters init.freeze froze keep their values and get no optimizer state
        trainable = [p for p in self.parameters() if p.requires_grad]
        optimizer = build_optimizer(trainable, self.recipe.optim, scaled_lr(self.recipe))
        return {"optimizer": optimizer, "lr_scheduler": build_scheduler(optimizer, self.recipe)}

    # --- validation ----------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._dev = DevTally(self.references)

    @torch.no_grad()
    def validation_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        if self._dev.is_padding(batch["ids"]):
            return
        loss_utt, _, _ = self(batch)
        enc, enc_lens = self.model.encode(batch["speech"], batch["speech_lengths"])
        best = greedy_ctc(self.model.ctc.argmax(enc), enc_lens, self.encoder.blank_id)
        hyps = [self.encoder.decode(ids) for ids in best]
        self._dev.add(batch["ids"], hyps, float(loss_utt), int(batch["num_tokens"]))

    def on_validation_epoch_end(self) -> None:
        sums = torch.tensor(self._dev.sums(), dtype=torch.float64, device=self.device)
        hyps = self._dev.hyps
        if self._world_size() > 1:
            sums = self.trainer.strategy.reduce(sums, reduce_op="sum")
            shards: list[Any] = [None] * self._world_size()
            dist.all_gather_object(shards, hyps)
            hyps = {utt: hyp for shard in shards for utt, hyp in shard.items()}
        metrics = dev_metrics(sums.tolist())
        self.log_dict(metrics, prog_bar=True, sync_dist=False)
        self.validation = (hyps, metrics)

"""The Lightning module that trains an ESPnet2 ASR model.

ESPnet's ``ESPnetASRModel.forward`` returns its loss averaged over *utterances*, so the gradient
grows with tokens per utterance and a length-mixed batch swings it. By default the module turns
that into a loss per target token (:mod:`asrflow.train.loss`, global token count under DDP).

A batch whose loss is NaN/inf is skipped (no backward, no update, on every rank together);
``diagnostics.max_consecutive_nonfinite`` such batches in a row stop the run with
:class:`~asrflow.train.failures.TrainingDiverged`.

Under DDP each rank trains on its shard of the batches and validates its shard of the dev set;
validation sums (loss, errors, words) are reduced over the ranks and the dev transcripts gathered,
so rank 0 logs and writes the metrics of the whole dev set.

Logged every step, as one row per step (:meth:`AsrModule.on_train_batch_end`): ``train/loss``
(the optimized value), ``train/loss_per_token``, ``train/batch_tokens``,
``train/batch_utterances``, ``train/batch_audio_seconds``, ``train/padding_ratio``,
``train/grad_norm`` (before clipping; the norm that clipping uses, computed once), ``lr`` (the
rate of this step's update) and ``epoch``. At each validation: ``valid/loss`` (per token),
``valid/wer`` and ``valid/cer`` (greedy CTC, pooled errors over the whole dev set), plus the
diagnostics of :class:`~asrflow.train.diagnostics.Diagnostics`.

Loss spikes: rank 0 hands each batch's loss to the diagnostics together with each utterance's
CTC loss per token, read from the training forward itself (:class:`UtteranceLossTap`: no second
forward, nothing that could change the weights), and checkpoints the spike detector's state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import jiwer
import lightning as L
import torch
import torch.distributed as dist

from asrflow.errors import AsrflowError
from asrflow.tokens import TokenEncoder, greedy_ctc
from asrflow.train.diagnostics import Diagnostics
from asrflow.train.failures import NonFiniteGuard
from asrflow.train.loss import normalize_loss, per_token
from asrflow.train.recipe import Recipe
from asrflow.train.resume import ResumableCSVLogger, SkippingSampler
from asrflow.train.schedule import build_optimizer, build_scheduler
from asrflow.train.shards import FILLER, ShardLoader

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


class AsrModule(L.LightningModule):
    """Trains ``model`` (an ``ESPnetASRModel``) with the recipe's loss, optimizer and schedule."""

    def __init__(
        self,
        model: torch.nn.Module,
        recipe: Recipe,
        encoder: TokenEncoder,
        references: Mapping[str, str],
        diagnostics: Diagnostics | None = None,
        train_sampler: SkippingSampler | ShardLoader | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.recipe = recipe
        self.encoder = encoder
        self.references = dict(references)
        self.diagnostics = diagnostics
        self._valid = self._empty_valid()
        self.train_sampler = train_sampler
        self.nonfinite = NonFiniteGuard(recipe.diagnostics.max_consecutive_nonfinite)
        self.utterance_losses = UtteranceLossTap(model)
        self._batches_in_epoch = 0
        self._resumed_batches = 0
        self._resync_log_step = False
        self._train_row: dict[str, Any] | None = None  # this batch's metrics, logged at its end
        self.last_train_metrics: dict[str, float] = {}
        """The last row logged (rank 0): the run summary's final train figures."""
        self.step_loss: torch.Tensor | None = None
        """The loss optimized at the last training step."""

    def _world_size(self) -> int:
        return self.trainer.world_size if self._trainer is not None else 1

    def _is_rank_zero(self) -> bool:
        return self._trainer is None or self.trainer.is_global_zero

    def setup(self, stage: str) -> None:
        """Check that the train sampler is sharded for this process's rank (the Trainer does
        not replace it: ``use_distributed_sampler=False``)."""
        sampler = getattr(self.train_sampler, "sampler", None)
        if sampler is None or self._trainer is None:
            return
        shard = (getattr(sampler, "world_size", 1), getattr(sampler, "rank", 0))
        if shard != (self.trainer.world_size, self.trainer.global_rank):
            raise AsrflowError(
                f"the train sampler is sharded for rank {shard[1]} of {shard[0]} but this process "
                f"is rank {self.trainer.global_rank} of {self.trainer.world_size}: ranks would "
                "train on the same batches; the launcher is not one asrflow supports (use the "
                "ddp strategy under srun, torchrun or Lightning's own launcher, not ddp_spawn)"
            )

    # --- exact resume: batches of the current epoch already trained on ---------------------

    def on_train_epoch_start(self) -> None:
        self._batches_in_epoch, self._resumed_batches = self._resumed_batches, 0
        if isinstance(self.train_sampler, ShardLoader):  # Lightning's hook reaches samplers only
            self.train_sampler.set_epoch(self.current_epoch)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # counted at the start: a checkpoint taken at this batch's end by a callback (whose
        # on_train_batch_end runs before the module's) must count it as consumed
        self._batches_in_epoch += 1
        if self._resync_log_step:
            self._resync_log_step = False
            # the step loggers write is Lightning's count of batches that stepped, which equals
            # global_step at a batch's start; lightning 2.6 restores it one off for checkpoints
            # taken in an epoch after the first, or where it raised its own SIGTERMException
            # (measured: a continued run logged one step twice)
            loop = self.trainer.fit_loop.epoch_loop
            if loop._batches_that_stepped != self.trainer.global_step:
                log.info(
                    "resume: logging step %d, not Lightning's %d",
                    self.trainer.global_step,
                    loop._batches_that_stepped,
                )
                loop._batches_that_stepped = self.trainer.global_step

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self._trainer is not None:
            for logger in self.trainer.loggers:  # the rows up to here on disk with the weights
                logger.save()
        checkpoint["asrflow_data"] = {
            "epoch": self.current_epoch,
            "batches_in_epoch": self._batches_in_epoch,
            "world_size": self._world_size(),
        }
        if self.diagnostics is not None:
            checkpoint["asrflow_diagnostics"] = self.diagnostics.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("asrflow_data") or {}
        batches = int(state.get("batches_in_epoch", 0))
        saved_world, world = int(state.get("world_size", 1)), self._world_size()
        if saved_world != world:
            log.warning(
                "resuming on %d process(es) a run checkpointed on %d: each rank skips %d "
                "batch(es) of the epoch, an approximation of where it stopped",
                world,
                saved_world,
                batches * saved_world // world,
            )
            batches = batches * saved_world // world
        self._resumed_batches = batches
        self._resync_log_step = True
        if self.train_sampler is not None:
            self.train_sampler.skip = self._resumed_batches
        if isinstance(self.train_sampler, ShardLoader):  # its first epoch's workers start early
            self.train_sampler.set_epoch(int(state.get("epoch", 0)))
        if self.diagnostics is not None:
            self.diagnostics.load_state_dict(
                checkpoint.get("asrflow_diagnostics"), int(checkpoint.get("global_step", 0))
            )
        if self._trainer is not None:
            for logger in self.trainer.loggers:
                if isinstance(logger, ResumableCSVLogger):
                    logger.resume_at(int(checkpoint.get("global_step", 0)))

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
        """A step on a filler batch (:mod:`asrflow.train.shards`): the same collective as a real
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
        loss_per_token = float(per_token(loss_utt.detach(), num_utts, num_tokens))
        self.step_loss = loss.detach()  # what LineProgress shows; the loggers get the row below
        if self._trainer is not None and self.trainer.progress_bar_callback is not None:
            # the live bar reads only what was self.log'ged (~1 ms a step, so only for a bar)
            self.log("train/loss", loss, prog_bar=True, logger=False, batch_size=num_utts)
        self._train_row = {
            "step": self.global_step,
            "train/loss": loss.detach(),
            "train/loss_per_token": loss_per_token,
            "train/batch_tokens": float(num_tokens),
            "train/batch_utterances": float(num_utts),
            "train/batch_audio_seconds": float(batch["audio_seconds"]),
            "train/padding_ratio": float(batch["padding_ratio"]),
        }
        if self._trainer is not None and self.trainer.optimizers:
            # the rate of this batch's update (the scheduler steps before the row is logged)
            self._train_row["lr"] = self.trainer.optimizers[0].param_groups[0]["lr"]
        if self.diagnostics is not None and self._is_rank_zero():  # rank 0 judges spikes
            self.diagnostics.observe_loss(
                self.global_step,
                loss_per_token,
                batch["ids"],
                self.utterance_losses.per_token(batch["text_lengths"], num_utts),
            )
        return loss

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip as Lightning would (it calls this after accumulation, every optimizer step), and
        keep the total gradient norm before clipping for the step's row: by norm, the norm that
        clipping computes (once; it was computed twice when logged from a hook of its own)."""
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
        if self._train_row is not None:
            self._train_row["train/grad_norm"] = total

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Log the batch's row to every logger at once, at the step Lightning would use.

        Not ``self.log``: Lightning's result collection costs ~0.4 ms per value and step (7
        values, demo model, 2 CPU cores: ~3 ms of a ~80 ms step), and its logger connector
        writes the CSV file at every step; the CSV logger writes its rows every 100 steps (and
        at each validation, checkpoint and the end). Rank 0 only, as Lightning logs."""
        row, self._train_row = self._train_row, None
        if row is None or not self._is_rank_zero():
            return
        step = int(row.pop("step"))
        row["epoch"] = self.current_epoch
        metrics = {key: float(value) for key, value in row.items()}
        self.last_train_metrics = metrics
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)

    def configure_optimizers(self) -> dict[str, Any]:
        from asrflow.train.recipe import scaled_lr

        # the parameters init.freeze froze keep their values and get no optimizer state
        trainable = [p for p in self.parameters() if p.requires_grad]
        optimizer = build_optimizer(trainable, self.recipe.optim, scaled_lr(self.recipe))
        return {"optimizer": optimizer, "lr_scheduler": build_scheduler(optimizer, self.recipe)}

    # --- validation ----------------------------------------------------------------------

    @staticmethod
    def _empty_valid() -> dict[str, Any]:
        return {
            "loss_sum": 0.0,
            "tokens": 0,
            "errors": 0,
            "words": 0,
            "char_errors": 0,
            "chars": 0,
            "hyps": {},
        }

    def _is_duplicate(self, utt: str) -> bool:
        """A copy Lhotse made to give every rank a batch (``<id>_dup<n>``)."""
        base, sep, n = utt.rpartition("_dup")
        return bool(sep) and n.isdigit() and utt not in self.references and base in self.references

    def on_validation_epoch_start(self) -> None:
        self._valid = self._empty_valid()

    @torch.no_grad()
    def validation_step(self, batch: Mapping[str, Any], batch_idx: int) -> None:
        if all(self._is_duplicate(utt) for utt in batch["ids"]):
            # Lhotse pads the last round of a sharded epoch with copies when fewer cuts than
            # ranks are left (a copy is alone in its batch): counting it would bias the metrics
            return
        loss_utt, _, _ = self(batch)
        num_utts, num_tokens = len(batch["ids"]), int(batch["num_tokens"])
        v = self._valid
        v["loss_sum"] += float(loss_utt) * num_utts
        v["tokens"] += num_tokens
        enc, enc_lens = self.model.encode(batch["speech"], batch["speech_lengths"])
        best = self.model.ctc.argmax(enc)
        for utt, ids in zip(
            batch["ids"], greedy_ctc(best, enc_lens, self.encoder.blank_id), strict=True
        ):
            hyp = self.encoder.decode(ids)
            ref = self.references.get(utt, "")
            v["hyps"][utt] = hyp
            if ref:
                words = jiwer.process_words(ref, hyp)
                chars = jiwer.process_characters(ref, hyp)
                v["errors"] += words.substitutions + words.deletions + words.insertions
                v["words"] += words.substitutions + words.deletions + words.hits
                v["char_errors"] += chars.substitutions + chars.deletions + chars.insertions
                v["chars"] += chars.substitutions + chars.deletions + chars.hits

    def on_validation_epoch_end(self) -> None:
        v = self._valid
        totals = torch.tensor(
            [v["loss_sum"], v["tokens"], v["errors"], v["words"], v["char_errors"], v["chars"]],
            dtype=torch.float64,
            device=self.device,
        )
        hyps = v["hyps"]
        if self._world_size() > 1:
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
            shards: list[Any] = [None] * self._world_size()
            dist.all_gather_object(shards, hyps)
            hyps = {utt: hyp for shard in shards for utt, hyp in shard.items()}
        loss_sum, tokens, errors, words, char_errors, chars = totals.tolist()
        metrics = {
            "valid/loss": loss_sum / max(tokens, 1.0),
            "valid/wer": errors / max(words, 1.0),
            "valid/cer": char_errors / max(chars, 1.0),
        }
        self.log_dict(metrics, prog_bar=True, sync_dist=False)
        if (
            self.diagnostics is not None
            and not self.trainer.sanity_checking
            and self.trainer.is_global_zero
        ):
            self.diagnostics.on_validation(self.global_step, hyps, self.references, metrics)

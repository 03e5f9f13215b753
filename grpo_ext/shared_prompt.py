"""The loss's forward with each group's prompt computed once (`share_prompt_forward`, issue 37).

In GRPO every group's `num_generations` rows share one prompt, left-padded by TRL to the batch's prompt width, so an
unshared forward computes the same prompt tokens (and back-propagates through them) once per row. Here the distinct
prompt rows of a micro-batch go through the model once with a KV cache (gradient on: LoRA acts on the prompt and the
completions attend to its keys and values), the cache is indexed out to the rows (an index keeps the gradient: the
rows' gradients sum back into the shared prompt), and the completion tokens attend to it. Positions and masks are the
unshared forward's: with no `position_ids` a transformers causal LM numbers the tokens 0..L-1 whatever the padding,
and a forward after a cache of length p numbers its tokens from p; the attention mask is the full one. So the
log-probs (and entropies and gradients) equal TRL's up to float rounding.

The prefix is the prompt minus its last token: TRL scores the first completion token from the hidden state at the
prompt's last position, so the second forward starts there (tokens P-1..L-1) and TRL's fused LM head scores exactly
the positions it scores in the unshared forward.

The shuffle: TRL shuffles the generation batch row by row before cutting it into micro-batches, so a micro-batch of
8 holds rows of ~4 prompts and little is shared. `shuffle_groups` permutes whole groups instead. Per optimizer step
the gradient is the sum of the micro-batches' gradients, which does not depend on how the generation batch is cut
when every micro-batch's loss is a sum over its rows with a weight that does not depend on the other rows of the
micro-batch (`group_shuffle_changes_loss` lists the loss types and options for which that holds).
"""

from __future__ import annotations

import contextlib
import logging

import torch

from grpo_ext.errors import UserError

logger = logging.getLogger(__name__)

#: Loss types whose micro-batch loss is a sum over its rows with weights independent of the micro-batch's contents
#: (TRL 1.16 `_compute_loss`): `dapo`, `cispo`, `vespo` divide by `num_items_in_batch` (the generation batch's token
#: count, the same for every cut); `grpo`, `sapo` take the mean over rows of per-row means and `luspo` the mean over
#: rows of per-row sums, `dr_grpo` divides by rows x max_completion_length: constants as long as every micro-batch has
#: the same number of rows, which TRL's `split_tensor_dict` guarantees. Not `bnpo`: it divides by the micro-batch's
#: own token count, which depends on which rows share it.
CUT_INVARIANT_LOSSES = ("dapo", "cispo", "vespo", "grpo", "sapo", "luspo", "dr_grpo")

#: On a CPU the loss's forward (the one back-propagated) attends through SDPA's math backend (matmuls and a softmax,
#: differentiated by autograd) instead of the fused flash kernel SDPA picks on a CPU, whose backward is slow at these
#: shapes (issue 49's profile of configs/real/cpu.yaml: 3.2 of ~16 CPU s of the loss, ~4x its forward; a step ~15%
#: faster, benchmarks/real_step.py part ``:cpu_flash``). The same attention up to float rounding. False: SDPA's pick.
CPU_MATH_ATTENTION = True
#: ... while the attention probabilities the math backend keeps for the backward (rows x heads x queries x keys x
#: layers, float32) stay under this many bytes; above, SDPA's pick (its memory does not grow with them).
MATH_ATTENTION_BYTES = 1 << 30


def group_shuffle_changes_loss(loss_type: str, top_entropy_quantile: float, entropy_bonus: bool) -> str | None:
    """Why keeping groups together in micro-batches would change the optimizer step's expected gradient (None: it
    does not, for any cut of the generation batch into equal micro-batches)."""
    if loss_type not in CUT_INVARIANT_LOSSES:
        return f"loss_type `{loss_type}` normalises by the micro-batch's own token count"
    if top_entropy_quantile < 1.0:
        return "top_entropy_quantile < 1 picks its entropy threshold per micro-batch"
    if entropy_bonus:
        return "the entropy bonus is a per-micro-batch token mean"
    return None


def group_permutation(n_rows: int, group_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random permutation of `n_rows` rows that moves blocks of `group_size` consecutive rows whole (each block's
    rows stay together and in order). A CPU index, as TRL's `shuffle_sequence_dict` makes: it indexes lists too, and
    tensors on any device."""
    if group_size < 1 or n_rows % group_size:
        raise ValueError(f"{n_rows} rows do not split into groups of {group_size}")
    groups = torch.randperm(n_rows // group_size, generator=generator, device="cpu")
    return (groups[:, None] * group_size + torch.arange(group_size, device="cpu")).reshape(-1)


def shuffle_groups(seq_dict: dict, group_size: int) -> dict:
    """`trl.trainer.utils.shuffle_sequence_dict` with whole groups permuted (rows `g*k .. g*k+k-1` are group `g`, as
    TRL's RepeatSampler lays them out); TRL's row shuffle where the rows do not split into whole groups."""
    from trl.trainer.utils import shuffle_sequence_dict

    batch_size = len(next(v for v in seq_dict.values() if v is not None))
    if batch_size % group_size:
        return shuffle_sequence_dict(seq_dict)
    permutation = group_permutation(batch_size, group_size)

    def permute(v):
        if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
            return v
        if isinstance(v, torch.Tensor):
            return v[permutation.to(v.device)]
        return [v[i] for i in permutation.tolist()]

    return {key: permute(val) for key, val in seq_dict.items()}


@contextlib.contextmanager
def grouped_shuffle(group_size: int):
    """Within the block, TRL's GRPOTrainer shuffles generation batches with `shuffle_groups` (its `_prepare_inputs`
    calls the module-level name `shuffle_sequence_dict`; nothing else there calls it)."""
    import trl.trainer.grpo_trainer as grpo_module

    original = grpo_module.shuffle_sequence_dict
    grpo_module.shuffle_sequence_dict = lambda seq_dict: shuffle_groups(seq_dict, group_size)
    try:
        yield
    finally:
        grpo_module.shuffle_sequence_dict = original


def shared_prompt_log_probs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, compute_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """Per-token log-probs (and entropies) of the last `logits_to_keep` tokens of `input_ids` (prompt then completion,
    as TRL's `_get_per_token_logps_and_entropies` takes them), each distinct prompt forwarded once.

    `model` is a causal LM patched with TRL's fused LM head (`model(..., labels=, fused_lm_head=True)`). Returns
    `(log_probs (B, logits_to_keep), entropies or None)`, or None when nothing is shared (every prompt row distinct,
    or a prompt of one token): then the caller's unshared forward is as cheap.
    """
    width = input_ids.size(1) - logits_to_keep  # the prompt width P
    if width < 2 or logits_to_keep < 1:
        return None
    prefix_ids, prefix_mask = input_ids[:, : width - 1], attention_mask[:, : width - 1]
    # A prompt row is its ids and its mask (a pad id may also be a real token id).
    key = torch.cat([prefix_ids, prefix_mask.to(prefix_ids.dtype)], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    if unique.size(0) == input_ids.size(0):
        return None
    # The prefix forward: only its cache is used; `logits_to_keep=1` keeps the LM head off its positions.
    prefix = model(
        input_ids=unique[:, : width - 1],
        attention_mask=unique[:, width - 1 :].to(attention_mask.dtype),
        use_cache=True,
        logits_to_keep=1,
    )
    cache = prefix.cache
    cache.batch_select_indices(inverse)  # indexing, not copying by hand: the gradient sums back per prompt
    tail_ids = input_ids[:, width - 1 :]
    # TRL's labels for these positions: the completion tokens, -100 at padding; the fused head shifts them by one,
    # so the first (the prompt's last token) is never a label.
    labels = tail_ids.masked_fill(attention_mask[:, width - 1 :] == 0, -100)
    outputs = model(input_ids=tail_ids, attention_mask=attention_mask, cache=cache, labels=labels, fused_lm_head=True)
    log_probs = outputs.log_probs[:, -logits_to_keep:]
    entropies = outputs.entropy[:, -logits_to_keep:] if compute_entropy else None
    return log_probs, entropies


def loss_attention(model, input_ids: torch.Tensor, keys: int | None = None):
    """The attention the loss's forward of `input_ids` runs with: SDPA's math backend on a CPU with the gradient on
    (:data:`CPU_MATH_ATTENTION`) where its saved probabilities fit :data:`MATH_ATTENTION_BYTES`, else SDPA's own pick
    (a null context). `keys`: the keys a query attends to (default: the sequence's length)."""
    if not (CPU_MATH_ATTENTION and input_ids.device.type == "cpu" and torch.is_grad_enabled()):
        return contextlib.nullcontext()
    # activation checkpointing recomputes the forward in the backward, outside this context: the recompute would run
    # another kernel than the forward and save other tensors (torch.utils.checkpoint refuses that)
    checkpointing = getattr(model, "is_activation_checkpointing", None)  # transformers 5's name
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing:
        return contextlib.nullcontext()
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads, layers = getattr(text, "num_attention_heads", None), getattr(text, "num_hidden_layers", None)
    if not isinstance(heads, int) or not isinstance(layers, int):
        return contextlib.nullcontext()
    rows, queries = input_ids.shape
    if rows * heads * queries * (keys or queries) * layers * 4 > MATH_ATTENTION_BYTES:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


class SharedPromptForwardMixin:
    """`share_prompt_forward` on a TRL `GRPOTrainer` subclass: the loss's log-probs with each group's prompt forwarded
    once (:func:`shared_prompt_log_probs`) and generation batches shuffled group by group (:func:`grouped_shuffle`),
    each override calling `super()` (TRL's own path) where it is off or cannot share."""

    def _init_shared_prompt(self, config) -> None:
        """Called by the trainer's `__init__` once TRL's is done (the model, loss type and entropy options set)."""
        self._unshared_reasons: set[str] = set()  # why a forward fell back to TRL's (logged once each)
        self._group_shuffle = self._decide_group_shuffle(config)

    def _decide_group_shuffle(self, config) -> bool:
        """Whether generation batches are shuffled group by group."""
        if not config.share_prompt_forward:
            return False
        checkpointing = getattr(self.model, "is_activation_checkpointing", None)  # transformers 5's name
        if checkpointing is None:
            checkpointing = getattr(self.model, "is_gradient_checkpointing", False)
        if checkpointing:  # set on the model after the config was checked
            raise UserError("share_prompt_forward: needs activation_checkpointing off (the model has it on)")
        reason = group_shuffle_changes_loss(
            self.loss_type, self.top_entropy_quantile, bool(getattr(self, "_entropy_bonus_enabled", False))
        )
        if reason:
            logger.warning("share_prompt_forward: TRL's row shuffle kept (%s): micro-batches share less", reason)
        return reason is None

    def _prepare_inputs(self, generation_batch):
        if not self._group_shuffle:
            return super()._prepare_inputs(generation_batch)
        with grouped_shuffle(self.num_generations):
            return super()._prepare_inputs(generation_batch)

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        reason = self._unshared_reason(model, kwargs) if self.args.share_prompt_forward else "off"
        if reason is not None:
            if reason != "off" and reason not in self._unshared_reasons:
                self._unshared_reasons.add(reason)
                logger.warning("share_prompt_forward: TRL's unshared forward used (%s)", reason)
            rows = min(batch_size or input_ids.size(0), input_ids.size(0))
            # with share_prompt_forward off the forward is TRL's to the bit (the extensions-off parity); the math
            # attention is part of the extension's loss path
            attention = contextlib.nullcontext() if reason == "off" else loss_attention(model, input_ids[:rows])
            with attention:
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kwargs
                )
        batch_size = batch_size or input_ids.size(0)  # TRL's chunks, each shared within itself
        log_probs, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            with self.accelerator.autocast(), loss_attention(model, ids):  # keys: at most the whole row
                got = shared_prompt_log_probs(model, ids, mask, logits_to_keep, compute_entropy)
            if got is None:  # nothing shared in this chunk
                with loss_attention(model, ids):
                    got = super()._get_per_token_logps_and_entropies(
                        model, ids, mask, logits_to_keep, compute_entropy=compute_entropy
                    )[:2]
            log_probs.append(got[0])
            entropies.append(got[1])
        return torch.cat(log_probs), torch.cat(entropies) if compute_entropy else None, None

    @staticmethod
    def _unshared_reason(model, kwargs) -> str | None:
        """Why this forward cannot share prompts (None: it can)."""
        if kwargs.get("compute_aux_loss"):
            return "a mixture-of-experts aux loss"
        if any(v is not None for k, v in kwargs.items() if k != "compute_aux_loss"):
            return "image or token-type inputs"
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return "DistributedDataParallel expects one forward per backward"
        return None

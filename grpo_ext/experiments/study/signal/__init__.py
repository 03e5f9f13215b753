"""The learning signal of a batch size, measured before a budget is spent: how well gradients of independent
minibatches agree at the policy's starting point.

If the gradient of a minibatch is ``g_k = mu + e_k`` (the expected gradient plus minibatch noise), the mean pairwise
cosine between independent minibatches estimates ``|mu|^2 / (|mu|^2 + E|e|^2)``: near 0 every update is mostly noise;
it rises with the batch size as the noise term shrinks by ``1 / samples``. The study picks its batch size (and LoRA
rank) on it (issue 28).

Objectives, both at the starting point (one step, on-policy):

- ``grpo``: ``prompts x group_size`` completions drawn with the trainer's sampler (``generation_backend: sampler``,
  :func:`grpo_ext.rollouts.sample_completions`: the harness's continuous sampler with its per-sample seeds, EOS kept
  as TRL keeps it, which the harness's text ``sample`` strips), rewards from the task's reward function, advantages
  from :func:`grpo_ext.advantages.outcome_advantages`. At ratio 1 TRL's per-token loss ``-min(r A, clip(r) A)`` has
  the gradient ``-A grad log p``; the KL term's gradient is exactly 0 there (policy = reference), so ``beta`` does not
  enter. Rows are weighted as TRL's ``loss_type`` reduces them (:func:`row_weights`).
- ``sft``: the task's reference solutions (EOS appended) of fresh prompts, mean NLL over completion tokens (TRL's
  ``SFTTrainer`` default): in the unified paradigm, gradient coefficient 1 on the reference data.

A minibatch whose groups all have equal rewards has a zero gradient: its cosine with anything counts as 0 (it moves
nothing), not NaN. With ``lora_rank > 0`` the gradient is over fresh LoRA adapters only; LoRA's B starts at 0, so at
the starting point only the B matrices have a gradient.

Minibatches are consecutive, disjoint slices of the task's ``train`` split after ``train_offset`` prompts, so they
are independent draws. The offset is 0 by default: the base is fine-tuned on the task's separate ``sft`` split,
disjoint from ``train`` (scripts/build_base_model.py), so no train prompt is one the base has seen.

Interval: a jackknife over minibatches, not a standard error over pairs. The ``m (m - 1) / 2`` pair cosines are not
independent (each minibatch's gradient enters ``m - 1`` of them), so a standard error over pairs would be too
narrow; the minibatches are the independent units, and the mean pairwise cosine is a U-statistic of them, for which
the leave-one-minibatch-out jackknife gives a standard error (interval: ``t`` with ``m - 1`` degrees of freedom).

Rooms: :mod:`.cosines` (the pure math), :mod:`.measure` (a minibatch's gradient on the model's device, and
:func:`measure_signal`), a study's stage 0 (:mod:`.settings`: what it measures, from the study's ``signal`` section
and its arm's method config; :mod:`.stage_zero`: measured or reused into ``signal.json``; :mod:`.report_section`: the
report's section), and :mod:`.cli` (the table and JSON of)::

    python -m grpo_ext.experiments.study.signal --model embedded --task arithmetic --objective grpo,sft \\
        --samples 64,256 --minibatches 6 [--lora-rank 0,16] [--out signal.json]
"""

from grpo_ext.experiments.study.signal.cosines import (
    LOSS_TYPES,
    cosine_matrix,
    jackknife_interval,
    pairwise_cosine,
    row_weights,
    surrogate_loss,
)
from grpo_ext.experiments.study.signal.measure import OBJECTIVES, completion_logps, measure_signal, minibatch_gradient

__all__ = [
    "LOSS_TYPES",
    "OBJECTIVES",
    "completion_logps",
    "cosine_matrix",
    "jackknife_interval",
    "measure_signal",
    "minibatch_gradient",
    "pairwise_cosine",
    "row_weights",
    "surrogate_loss",
]

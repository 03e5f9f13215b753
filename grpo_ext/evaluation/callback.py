"""Pass@k / maj@k on a held-out slice during training, logged like any other training metric.

    callback = make_passk_callback("arithmetic", n_prompts=64, n=8, ks=(1, 4, 8), every=50, trainer=trainer)

Every ``eval_steps`` optimizer steps the callback samples ``n`` completions for each held-out prompt with the
trainer's current policy (unwrapped; a PEFT model is used as it is, adapters active), scores them with the
harness and logs ``eval/pass@k`` and ``eval/maj@k`` for each k through the trainer's loggers (the console,
``state.log_history``, TensorBoard/W&B/... per ``report_to``). The model is put back in training mode
afterwards and the global RNG is left untouched (each sample has its own random stream), so training is not
perturbed.
The same seed is used at every evaluation: successive points differ by the model, not by the sampling noise.

It needs a reference to the trainer to log through it (``trainer.add_callback(cb); cb.bind(trainer)``, or pass
``trainer=`` to :func:`make_passk_callback`, which does both). Unbound, it still appends its metrics to
``state.log_history`` but no logger integration sees them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformers import TrainerCallback

from grpo_ext.evaluation.backends import TransformersBackend
from grpo_ext.evaluation.harness import check_ks, evaluate_model, validate_problems
from grpo_ext.evaluation.registry import headline_entries
from grpo_ext.sampler.sampling import SamplingParams
from grpo_ext.tasks import Task, get_task

logger = logging.getLogger(__name__)

__all__ = ["PassKMajKCallback", "make_passk_callback"]


class PassKMajKCallback(TrainerCallback):
    """Runs the pass@k / maj@k harness every ``eval_steps`` steps on ``problems`` (dicts with prompt/answer)."""

    def __init__(
        self,
        task: Task,
        problems: Sequence[dict],
        params: SamplingParams,
        ks: Sequence[int],
        eval_steps: int,
        *,
        prefix: str = "eval/",
        eval_on_start: bool = False,
        eval_on_end: bool = True,
        trainer=None,
    ):
        if isinstance(eval_steps, bool) or not isinstance(eval_steps, int) or eval_steps < 1:
            raise ValueError(f"PassKMajKCallback: eval_steps must be an integer >= 1, got {eval_steps!r}")
        kept, dropped = check_ks(ks, params.n)
        if not kept:
            raise ValueError(f"PassKMajKCallback: every k ({dropped}) exceeds n={params.n}")
        if dropped:
            logger.warning("PassKMajKCallback: k=%s > n=%d dropped", dropped, params.n)
        self.task, self.params, self.ks = task, params, kept
        self.problems = validate_problems(list(problems), task, f"PassKMajKCallback held-out slice ({task.name})")
        self.eval_steps, self.prefix = eval_steps, prefix
        self.eval_on_start, self.eval_on_end = eval_on_start, eval_on_end
        self.trainer = trainer
        self.last_step: int | None = None
        self.history: list[dict] = []  # every evaluation's metrics, with its step

    def bind(self, trainer):
        """Log through `trainer` (its loggers and `state.log_history`). Returns the trainer."""
        self.trainer = trainer
        return trainer

    # ---- the evaluation ----------------------------------------------------------------------------------
    def evaluate(self, model, tokenizer) -> dict[str, float]:
        """The metrics of `model` now: each headline metric (pass@k, maj@k) at each k, named ``prefix`` + its name
        at k (``eval_pass@4``)."""
        if self.trainer is not None and hasattr(self.trainer, "accelerator"):
            model = self.trainer.accelerator.unwrap_model(model)
        was_training = model.training
        try:
            result = evaluate_model(
                TransformersBackend(model, tokenizer, name="policy"),
                self.task,
                self.params,
                self.ks,
                cache_path=None,
                problems=self.problems,
                progress=False,
            )
        finally:
            model.train(was_training)
        return {self.prefix + m.at(k): result[m.name][str(k)] for m in headline_entries() for k in self.ks}

    def _run(self, args, state, control, model, processing_class) -> None:
        if model is None:
            return
        tokenizer = processing_class
        if tokenizer is None and self.trainer is not None:
            tokenizer = getattr(self.trainer, "processing_class", None)
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor wraps its tokenizer
        if tokenizer is None:
            raise ValueError("PassKMajKCallback needs the trainer's tokenizer (processing_class)")
        metrics = self.evaluate(model, tokenizer)
        self.last_step = state.global_step
        self.history.append({**metrics, "step": state.global_step})
        if self.trainer is not None:
            # transformers' Trainer.log: appends to state.log_history and calls every callback's on_log (report_to
            # integrations). TRL's GRPOTrainer.log is bypassed on purpose: it would fold (and clear) the training
            # metrics it is accumulating into this entry.
            from transformers import Trainer

            log = Trainer.log if isinstance(self.trainer, Trainer) else type(self.trainer).log
            # Trainer.log clears control.should_log (the flag the trainer's own logging step reads next): keep it.
            should_log = control.should_log
            log(self.trainer, dict(metrics))
            control.should_log = should_log
            if getattr(self.trainer, "control", control) is not control:
                self.trainer.control.should_log = should_log
        else:
            state.log_history.append({**metrics, "step": state.global_step})
            logger.info("step %d: %s", state.global_step, metrics)

    # ---- TrainerCallback events --------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.eval_on_start:
            self._run(args, state, control, model, processing_class)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step > 0 and state.global_step % self.eval_steps == 0:
            self._run(args, state, control, model, processing_class)

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.eval_on_end and self.last_step != state.global_step:
            self._run(args, state, control, model, processing_class)


def make_passk_callback(
    task: str | Task,
    n_prompts: int,
    n: int,
    ks: Sequence[int],
    every: int,
    *,
    split: str = "test",
    task_kwargs: dict | None = None,
    temperature: float = 0.7,
    top_p: float = 1.0,
    max_new_tokens: int | None = None,
    seed: int = 0,
    batch_size: int = 8,
    trainer=None,
    **callback_kwargs,
) -> PassKMajKCallback:
    """A :class:`PassKMajKCallback` on the first ``n_prompts`` problems of the task's ``split`` (held out: the
    test split by default), ``n`` samples each, every ``every`` steps.

    ``max_new_tokens`` defaults to the trainer's ``max_completion_length`` (TRL) when a trainer is given, else 64.
    With ``trainer``, the callback is added to it and bound (logs through it).
    """
    if isinstance(task, str):
        task = get_task(task, **(task_kwargs or {}))
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, int) or n_prompts < 1:
        raise ValueError(f"make_passk_callback: n_prompts must be an integer >= 1, got {n_prompts!r}")
    if max_new_tokens is None:
        max_new_tokens = getattr(getattr(trainer, "args", None), "max_completion_length", None) or 64
    params = SamplingParams(
        n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size
    )
    problems = list(task.load(split, n_prompts))[:n_prompts]
    callback = PassKMajKCallback(task, problems, params, ks, every, **callback_kwargs)
    if trainer is not None:
        trainer.add_callback(callback)
        callback.bind(trainer)
    return callback

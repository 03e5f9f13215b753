"""Generation-batch plumbing: how many prompts a run draws and where refill rounds take theirs (none of the run's
own, so no prompt is trained on twice), TRL's loss types and which of them need the kept-row normaliser, batch-dict
surgery (put rows of one generation batch into another, padding widths to match), and the registry of what happens to
groups without learning signal.

:data:`ZERO_STD_STRATEGIES` maps the config's ``zero_std_groups`` value to a :class:`ZeroStdStrategy`, which carries
everything the rest of the package asks of a strategy: whether groups without signal leave the loss, what replaces
them first (``refill``'s fresh groups), whether it draws prompts of its own, its config check and its model-card
line. No reader compares against a strategy's name; a new one is one :func:`register_zero_std_strategy` call.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from grpo_ext.errors import UserError
from grpo_ext.registration import qualified_name

logger = logging.getLogger(__name__)

#: TRL 1.16's GRPO loss types (`GRPOConfig.loss_type`), the values a GRPO config may name: TRL itself only finds an
#: unknown one at the first loss.
GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")

#: Loss types whose TRL reduction is normalised by the micro-batch itself, and by what: its rows (`grpo`/`sapo` mean
#: per sequence then over rows, `luspo` sums per sequence then averages rows, `dr_grpo` divides by rows x
#: max_completion_length) or its tokens (`bnpo`). With rows of skipped groups in the micro-batch, that normaliser is
#: wrong: `_compute_loss` replaces it by the generation batch's kept rows (tokens). `dapo`, `cispo` and `vespo` divide
#: by `num_items_in_batch`, already the generation batch's kept tokens.
KEPT_NORMALISER = {"grpo": "rows", "sapo": "rows", "luspo": "rows", "dr_grpo": "rows", "bnpo": "tokens"}

# Left-padded (prompt side) keys and their padding; every other 2-D tensor is completion-aligned, right-padded.
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
_PAD_VALUES = {"prompt_mask": 0, "completion_mask": 0, "tool_mask": 1}


def _pad(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
    extra = width - t.shape[1]
    if extra <= 0:
        return t
    return F.pad(t, (extra, 0) if left else (0, extra), value=value)


def replace_rows(batch: dict, fresh: dict, dst: list[int], src: list[int], pad_token_id: int) -> dict:
    """A copy of `batch` whose rows `dst` are `fresh`'s rows `src` (all per-row tensors, same keys).

    Scalars (`num_items_in_batch`) are left to the caller to recount.
    """
    if batch.keys() != fresh.keys():
        raise ValueError(f"cannot merge generation batches with different keys: {sorted(batch)} vs {sorted(fresh)}")
    merged = {}
    for key, value in batch.items():
        other = fresh[key]
        if not isinstance(value, torch.Tensor) or value.ndim == 0:
            merged[key] = value
            continue
        if value.ndim > 2:
            raise ValueError(f"refill cannot merge the {value.ndim}-D batch field {key!r}")
        if value.ndim == 2:
            left = key in _LEFT_PADDED
            pad = pad_token_id if key in ("prompt_ids", "completion_ids") else _PAD_VALUES.get(key, 0)
            width = max(value.shape[1], other.shape[1])
            value, other = _pad(value, width, pad, left), _pad(other, width, pad, left)
        value = value.clone()
        value[dst] = other[src].to(value.dtype)
        merged[key] = value
    return merged


def prompts_drawn(args) -> int | None:
    """Distinct prompts a GRPO run of ``max_steps`` steps draws from its dataset (refill rounds excluded), or None
    when the run is sized in epochs. TRL's sampler gives each generation batch ``generation_batch_size /
    num_generations`` prompts and reuses it for ``steps_per_generation x num_iterations`` micro-batches; a step is
    ``gradient_accumulation_steps`` micro-batches. ``generation_batch_size`` already counts every process."""
    if args.max_steps is None or args.max_steps <= 0:
        return None
    micro_batches = args.max_steps * args.gradient_accumulation_steps
    generations = math.ceil(micro_batches / (args.steps_per_generation * args.num_iterations))
    return generations * (args.generation_batch_size // args.num_generations)


def refill_reserve(task, run_prompts: int, args):
    """The task's train prompts after the run's first ``run_prompts`` (``task.load`` is prefix-stable), as many as
    refill rounds could ever draw (every round of every generation batch): refill then never repeats a prompt of
    the run's, nor of its own while the reserve lasts. None, with a warning, when the split has no prompt after the
    run's (a dataset of fixed size, e.g. GSM8K without `train_size`): refill then draws the run's prompts again."""
    per_round = args.generation_batch_size // args.num_generations  # what one refill round draws
    generation_batches = math.ceil((prompts_drawn(args) or run_prompts) / per_round)
    wanted = generation_batches * args.max_refill_rounds * per_round
    try:
        pool = task.load("train", run_prompts + wanted)
    except UserError:  # fewer distinct train problems than asked (a small arithmetic space)
        pool = task.load("train", run_prompts)
    left = max(len(pool) - run_prompts, 0)
    if left < wanted:
        logger.warning(
            "zero_std_groups: refill: the train split holds %d prompts after the run's %d, refill rounds may draw %d: "
            "%s",
            left,
            run_prompts,
            wanted,
            "they repeat once it is used up" if left else "refill draws the run's own prompts again",
        )
    return pool.select(range(run_prompts, len(pool))) if left else None


class RefillPrompts:
    """The prompts of refill rounds, a function of the draw count alone (which checkpoints keep), so a resumed run
    draws what the first run would have, and every process draws the same.

    A map-style dataset is read in a seeded random order, each draw taking the rows after the previous draw's (a new
    order when it runs out), so no prompt comes twice before the dataset is used up; an `IterableDataset` (no random
    access) is read on from where the previous draw stopped, from its start again when it runs out.
    """

    def __init__(self, dataset, seed: int):
        self.dataset, self.seed, self.draws = dataset, seed, 0
        self._stream = None
        self._order: tuple | None = None  # ((epoch, size), that epoch's reading order), the one in use

    def next_prompts(self, n_prompts: int) -> list[dict]:
        dataset = self.dataset
        if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
            if len(dataset) == 0:
                raise UserError("zero_std_groups: `refill` found no examples in the training dataset")
            start = self.draws * n_prompts
            prompts = [dataset[self._row(position, len(dataset))] for position in range(start, start + n_prompts)]
        else:
            if self._stream is None:  # the first draw of this process: skip what earlier draws (before a resume) read
                self._stream = self._examples(skip=self.draws * n_prompts)
            prompts = list(itertools.islice(self._stream, n_prompts))
        self.draws += 1
        return prompts

    def _row(self, position: int, size: int) -> int:
        """The row at ``position`` of the endless reading order: epoch ``position // size`` is its own permutation."""
        epoch, offset = divmod(position, size)
        if self._order is None or self._order[0] != (epoch, size):
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)  # a host generator, host indices
            self._order = ((epoch, size), torch.randperm(size, generator=generator, device="cpu").tolist())
        return self._order[1][offset]

    def _examples(self, skip: int):
        """The dataset's examples, endlessly (an epoch after another), after the first `skip`."""
        read = 0
        while True:
            empty = True
            for example in self.dataset:
                empty = False
                if read >= skip:
                    yield example
                read += 1
            if empty:
                raise UserError("zero_std_groups: `refill` found no examples in the training dataset")


# ---- zero-std strategies: what happens to groups without learning signal ---------------------------------------------


def _no_check(config) -> str | None:
    return None


def _no_card(training: dict) -> str | None:
    return None


@dataclass(frozen=True)
class ZeroStdStrategy:
    """A registry entry: what the config, the trainer, the factory and the model card need of one ``zero_std_groups``
    value (DAPO's dynamic sampling and its relatives).

    Attributes:
        name: the ``zero_std_groups`` value that selects it.
        description: one phrase for the config's help.
        drops_groups: groups still without signal after ``fill`` leave the loss (their rows masked, every loss type's
            normaliser taken over the generation batch's kept rows); False: TRL's batch, untouched (``keep``).
        fill: ``(trainer, batch, no_signal) -> (batch, no_signal)``, called on each training generation batch before
            the drop: ``no_signal`` is a ``(local groups,)`` bool tensor, True where a group has no signal; a strategy
            may replace such groups' rows (``refill``) and clear their flags. None: nothing is replaced. It runs on
            every process and must take the same decisions on all (gather before deciding).
        draws_prompts: ``fill`` draws prompts beyond the run's own (``trainer._refill``): the factory gives it a
            reserve of unused prompts, checkpoints keep its draw count, and the iterative loop (each iteration trains
            on its own slice once) and vision-language models (no image rows to draw) refuse it.
        check: config -> a message (naming the field) for a combination of fields it cannot run with, or None.
        card: the resolved config's ``training`` section -> the model card's line on it, or None (nothing to say).
    """

    name: str
    description: str
    drops_groups: bool
    fill: Callable[[Any, dict, torch.Tensor], tuple[dict, torch.Tensor]] | None = None
    draws_prompts: bool = False
    check: Callable[[Any], str | None] = _no_check
    card: Callable[[dict], str | None] = _no_card


#: ``zero_std_groups`` value -> its entry; the first is the default (TRL's behaviour: every group kept).
ZERO_STD_STRATEGIES: dict[str, ZeroStdStrategy] = {}


def register_zero_std_strategy(strategy: ZeroStdStrategy) -> ZeroStdStrategy:
    """Add ``strategy`` to :data:`ZERO_STD_STRATEGIES`: ``zero_std_groups: <name>`` is then a valid config value (on
    the command line too), and the config, the trainer, the factory, resuming and the model card read the entry. A
    taken name is a ``ValueError`` unless the entry's behaviour is the same function (its module reloaded)."""
    existing = ZERO_STD_STRATEGIES.get(strategy.name)
    if existing is not None and _identity(existing) != _identity(strategy):
        raise ValueError(f"zero-std strategy {strategy.name!r} is already registered")
    ZERO_STD_STRATEGIES[strategy.name] = strategy
    return strategy


def _identity(strategy: ZeroStdStrategy) -> tuple:
    # what a reload of the registering module reproduces: its functions' qualified names and its flags
    return (
        *(qualified_name(f) if f is not None else None for f in (strategy.fill, strategy.check, strategy.card)),
        strategy.drops_groups,
        strategy.draws_prompts,
    )


def get_zero_std_strategy(name: str) -> ZeroStdStrategy:
    """The registry entry for ``name``; ``ValueError`` naming ``zero_std_groups`` and the registered names."""
    try:
        return ZERO_STD_STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"zero_std_groups: unknown value {name!r}; expected one of {', '.join(ZERO_STD_STRATEGIES)}"
        ) from None


def refill_groups(trainer, batch: dict, no_signal: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """``refill``: up to ``max_refill_rounds`` fresh generation batches (``trainer._refill_round()``: its batch and its
    groups without signal), each of whose groups with signal replaces one without, while some group of some process
    lacks signal and the round fits the sample budget (``trainer._refill_wanted``, the same answer on every process).
    Local batches hold whole groups (checked in the config)."""
    group, rounds = trainer.num_generations, 0
    while rounds < trainer.args.max_refill_rounds and trainer._refill_wanted(no_signal):
        rounds += 1
        fresh, fresh_no_signal = trainer._refill_round()
        fresh_signal = (~fresh_no_signal).nonzero().flatten().tolist()
        missing = no_signal.nonzero().flatten().tolist()
        n = min(len(missing), len(fresh_signal))
        if n:
            dst = [g * group + j for g in missing[:n] for j in range(group)]
            src = [g * group + j for g in fresh_signal[:n] for j in range(group)]
            batch = replace_rows(batch, fresh, dst, src, pad_token_id=trainer._tokenizer.pad_token_id)
            no_signal[missing[:n]] = False
    trainer._metrics["train"]["zero_std/refill_rounds"].append(float(rounds))
    return batch, no_signal


def _refill_check(config) -> str | None:
    local = config.per_device_train_batch_size * config.steps_per_generation
    if local % config.num_generations == 0:
        return None
    return (
        "zero_std_groups: `refill` replaces whole groups on each process, so per_device_train_batch_size x "
        f"steps_per_generation ({local}) must be a multiple of num_generations ({config.num_generations})"
    )


def _skip_card(training: dict) -> str:
    return "zero-std groups: skip"


def _refill_card(training: dict) -> str:
    return f"zero-std groups: refill, up to {training.get('max_refill_rounds')} refill rounds"


register_zero_std_strategy(ZeroStdStrategy("keep", "every group stays in the loss (TRL)", drops_groups=False))
register_zero_std_strategy(
    ZeroStdStrategy(
        "skip",
        "groups without signal leave the loss; the kept rows are normalised over the whole generation batch",
        drops_groups=True,
        card=_skip_card,
    )
)
register_zero_std_strategy(
    ZeroStdStrategy(
        "refill",
        "further groups are generated until the batch has signal (DAPO's dynamic sampling), at most "
        "max_refill_rounds rounds; what is still missing is skipped",
        drops_groups=True,
        fill=refill_groups,
        draws_prompts=True,
        check=_refill_check,
        card=_refill_card,
    )
)

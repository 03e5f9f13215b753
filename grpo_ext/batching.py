"""Generation-batch plumbing: how many prompts a run draws and where refill rounds take theirs (none of the run's
own, so no prompt is trained on twice), which loss types need the kept-row normaliser, and batch-dict surgery (put
rows of one generation batch into another, padding widths to match)."""

from __future__ import annotations

import itertools
import logging
import math

import torch
import torch.nn.functional as F

from grpo_ext.errors import UserError

logger = logging.getLogger(__name__)

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

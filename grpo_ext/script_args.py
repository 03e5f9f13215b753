"""Script arguments shared by the training entry points (parsed by `trl.TrlParser` with the configs)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from grpo_ext.errors import UserError
from grpo_ext.validation import check_number


def parse_task_kwargs(value: dict | str | None) -> dict:
    """`task_kwargs` from YAML (a mapping) or the command line (a JSON string), as a dict."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise UserError(f"task_kwargs: expected a JSON object, got {value!r}") from err
    if value is not None and not isinstance(value, dict):
        raise UserError(f"task_kwargs: expected a mapping, got {type(value).__name__}")
    return dict(value or {})


#: The largest `train_size` taken (a sane bound, checked before any prompt is built: 1e11 built for over ten minutes
#: and 6.6 GB before it was stopped). A task that knows how many problems its knobs allow is held to that too.
MAX_TRAIN_SIZE = 1_000_000


@dataclass
class TaskFields:
    """Which task supplies the prompts and the verifier, and how many of its train prompts to use: the fields every
    runner's arguments share (`TaskArguments` here, `grpo_ext.experiments.iterative.args.IterativeArguments`)."""

    task: str = field(default="arithmetic", metadata={"help": "Task name (see grpo_ext.tasks.TASKS)."})
    task_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "Task knobs, e.g. {max_operands: 3} in YAML or a JSON string on the command line."},
    )
    train_size: int | None = field(default=None, metadata={"help": "Number of training prompts (task default)."})
    train_offset: int = field(
        default=0,
        metadata={
            "help": "Train prompts skipped before the run's (0 for the embedded task: its train split is disjoint "
            "from the base's SFT set, split sft; a model fine-tuned on the first train prompts, e.g. a study's SFT "
            "start, needs them skipped so that the run's prompts are fresh)."
        },
    )

    def __post_init__(self):
        self.task_kwargs = parse_task_kwargs(self.task_kwargs)
        check_number("train_size", self.train_size, low=1, integer=True, allowed=(None,))
        if self.train_size is not None and self.train_size > MAX_TRAIN_SIZE:
            raise UserError(
                f"train_size: {self.train_size} is more than {MAX_TRAIN_SIZE:,} prompts, a bound no run here needs "
                "(DeepSeekMath's RL used 144K questions; building 1M embedded-task prompts takes ~40 s and ~1 GB)"
            )
        check_number("train_offset", self.train_offset, low=0, integer=True)

    def train_prompts(self, task):
        """The run's train prompts: `train_size` of the task's train split after its first `train_offset` (the
        split is prefix-stable, so the skipped prompts are the ones a model trained on the first ones saw)."""
        size = self.train_size
        space = task.problem_space() if size is not None and hasattr(task, "problem_space") else None
        if space is not None and self.train_offset + size > space:
            offset = f" after train_offset {self.train_offset}" if self.train_offset else ""
            raise UserError(
                f"train_size: {size}{offset} is more than the {space} distinct problems task {task.name!r} draws "
                "with these task_kwargs (all splits together; the train split is a part of them)"
            )
        train = task.load("train", None if size is None else self.train_offset + size)
        if self.train_offset >= len(train):
            raise UserError(
                f"train_offset: {self.train_offset} skips every one of the task's {len(train)} train prompts"
            )
        return train.select(range(self.train_offset, len(train))) if self.train_offset else train


@dataclass
class TaskArguments(TaskFields):
    """The task (`TaskFields`), and which reward functions score completions."""

    reward_funcs: list[str] = field(
        default_factory=lambda: ["outcome"],
        metadata={
            "help": "Reward functions: `outcome` (the task's verifier), `outcome_strict` (the verifier, answer in the "
            "task's strict form, e.g. `#### n`) or dotted import paths."
        },
    )

    passk_eval_steps: int = field(
        default=0,
        metadata={"help": "Every this many steps, log eval/pass@k and eval/maj@k on held-out prompts (0: off)."},
    )
    passk_eval_prompts: int = field(default=64, metadata={"help": "Held-out prompts for the pass@k callback."})
    passk_eval_n: int = field(default=8, metadata={"help": "Samples per prompt for the pass@k callback."})
    passk_eval_k: list[int] = field(default_factory=lambda: [1, 8], metadata={"help": "k values (<= passk_eval_n)."})

    def __post_init__(self):
        super().__post_init__()
        check_number("passk_eval_steps", self.passk_eval_steps, low=0, integer=True)
        check_number("passk_eval_prompts", self.passk_eval_prompts, low=1, integer=True)
        check_number("passk_eval_n", self.passk_eval_n, low=1, integer=True)
        if not self.passk_eval_k:
            raise UserError("passk_eval_k: at least one k is needed")
        for k in self.passk_eval_k:
            check_number("passk_eval_k", k, low=1, integer=True)
        if self.passk_eval_steps and any(k > self.passk_eval_n for k in self.passk_eval_k):
            raise UserError(
                f"passk_eval_k: every k must be <= passk_eval_n ({self.passk_eval_n}), got {self.passk_eval_k}"
            )
        if not self.reward_funcs:
            raise UserError("reward_funcs: at least one reward function is needed")


@dataclass
class TrainArguments(TaskArguments):
    """scripts/train.py's script arguments: the task's, and what to do with an output folder holding another run."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Delete what an earlier grpo-ext run left in output_dir (a folder holding grpo_ext_run.json) and "
            "train from scratch. Without it such a folder is refused, unless resume_from_checkpoint continues it."
        },
    )


def parse_train_args(argv: list[str]):
    """``scripts/train.py``'s three argument groups (TrainArguments, GRPOExtConfig, trl's ModelConfig) from its
    command line (``--config`` YAML and flags); whatever they reject is a `UserError` (see
    `grpo_ext.cli.parse_trl_config`). For a script that checks a training command without running it."""
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig

    return parse_trl_config((TrainArguments, GRPOExtConfig, ModelConfig), argv)

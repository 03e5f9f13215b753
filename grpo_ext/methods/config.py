"""Method configs: ``configs/methods/<name>.yaml`` parsed by ``trl.TrlParser`` into four groups.

``MethodArguments`` (which method, its sampling budget, the learning curve), the task (``TaskArguments``), the
TRL config of the method's trainer (its paradigm entry's ``config_class``: ``SFTConfig`` for SFT/RFT, ``DPOConfig``
for DPO, ``GRPOExtConfig`` for the online methods) and TRL's ``ModelConfig``. Command-line flags override the YAML,
as in ``scripts/train.py``.

The sampling budget is part of the config: ``sample_budget`` is the number of completions the method generates
(online methods: ``max_steps x`` samples per step; RFT and DPO: ``train_size x samples_per_prompt`` drawn once
from the base model; SFT: 0). When a config states it, the runner checks it against what the other fields imply,
so the number written in the YAML is the number that is generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grpo_ext.errors import UserError, read_yaml
from grpo_ext.methods.paradigm import get_method
from grpo_ext.validation import check_number

__all__ = ["MethodArguments", "config_class", "parse_method_args", "sampling_budget", "trained_sequences_per_step"]


@dataclass
class MethodArguments:
    """Which method a config trains, and the knobs that are not TRL's."""

    method: str = field(
        default="",
        metadata={
            "help": "The method (a key of grpo_ext.methods.METHODS): sft, rft, online_rft, dpo, grpo_outcome, "
            "grpo_process."
        },
    )
    sample_budget: int | None = field(
        default=None,
        metadata={"help": "Completions the method generates; checked against the other fields when set."},
    )
    samples_per_prompt: int = field(
        default=8, metadata={"help": "RFT / DPO: completions drawn from the base model for each train prompt."}
    )
    sample_temperature: float = field(default=1.0, metadata={"help": "RFT / DPO: sampling temperature."})
    sample_max_new_tokens: int = field(default=48, metadata={"help": "RFT / DPO: longest completion drawn."})
    sample_batch_size: int = field(default=16, metadata={"help": "RFT / DPO: prompts per sampling batch."})
    dpo_pairs_per_prompt: int = field(
        default=4, metadata={"help": "DPO: at most this many (correct, incorrect) pairs per prompt."}
    )
    curve_every: int = field(
        default=0, metadata={"help": "Learning curve: evaluate every this many steps (0: no curve)."}
    )
    curve_prompts: int = field(default=64, metadata={"help": "Learning curve: validation prompts (never test)."})
    curve_n: int = field(default=8, metadata={"help": "Learning curve: samples per prompt."})
    curve_temperature: float = field(default=0.7, metadata={"help": "Learning curve: sampling temperature."})

    def __post_init__(self):
        if not self.method:
            raise UserError("method: missing; name the method in the config (e.g. `method: rft`)")
        get_method(self.method)  # unknown -> a UserError naming the known ones
        for name in (
            "samples_per_prompt",
            "sample_max_new_tokens",
            "sample_batch_size",
            "dpo_pairs_per_prompt",
            "curve_prompts",
            "curve_n",
        ):
            check_number(name, getattr(self, name), low=1, integer=True)
        check_number("curve_every", self.curve_every, low=0, integer=True)
        check_number("sample_budget", self.sample_budget, low=0, integer=True, allowed=(None,))
        for name in ("sample_temperature", "curve_temperature"):  # finite: NaN and inf sample garbage
            check_number(name, getattr(self, name), low=0, low_open=True)


def config_class(method_name: str):
    """The TRL config dataclass of a method's trainer (its paradigm entry's)."""
    return get_method(method_name).config_class()


def _method_name(argv: list[str]) -> str:
    """The method named by ``--method`` on the command line, else by the config file's ``method`` key."""
    if "--method" in argv:
        i = argv.index("--method")
        if i + 1 >= len(argv):
            raise UserError("--method needs a value")
        return argv[i + 1]
    if "--config" not in argv:
        raise UserError("no config: pass --config configs/methods/<method>.yaml")
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise UserError("--config needs a path")
    path = Path(argv[i + 1])
    if not path.is_file():
        raise FileNotFoundError(f"--config: no such file: {path}")
    config = read_yaml(path, "--config")
    if not isinstance(config, dict) or not config.get("method"):
        raise UserError(f"{path}: no `method:` key (one of the names in grpo_ext.methods.METHODS)")
    return str(config["method"])


def parse_method_args(argv: list[str]):
    """``(method_args, task_args, training_args, model_args)`` from ``--config FILE [--flag value ...]``; bad input is
    a `UserError` (`grpo_ext.cli.parse_trl_config`)."""
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.script_args import TaskArguments

    name = _method_name(list(argv))
    method = get_method(name)
    # the training config's checks are the entry's: they know its trainer's loss types and whether beta must be > 0
    types = (MethodArguments, TaskArguments, config_class(name), ModelConfig)
    return parse_trl_config(types, list(argv), check_ranges=method.check_config)


def trained_sequences_per_step(method_name: str, training_args, world_size: int = 1) -> int:
    """Sequences one optimizer step computes the gradient on (a DPO pair is two sequences)."""
    per_step = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * world_size
    return get_method(method_name).sequences_per_example * per_step


def sampling_budget(
    method_name: str, method_args: MethodArguments, task_args, training_args, world_size: int = 1
) -> int:
    """Completions the method generates, implied by its config (without zero-std refills, which add to it)."""
    method = get_method(method_name)
    if method.online:
        per_step = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * world_size
        # TRL generates per_step x num_iterations samples every num_iterations steps.
        return training_args.max_steps * per_step // training_args.num_iterations
    if not method.draws_samples:
        return 0
    if task_args.train_size is None:
        raise UserError(f"method {method_name!r}: set train_size, the prompts sampled from (no default here)")
    return task_args.train_size * method_args.samples_per_prompt


def check_budget(method_name: str, method_args: MethodArguments, task_args, training_args) -> int:
    """The implied budget; a ``UserError`` when the config states another one."""
    budget = sampling_budget(method_name, method_args, task_args, training_args)
    if method_args.sample_budget is not None and method_args.sample_budget != budget:
        raise UserError(
            f"sample_budget: the config states {method_args.sample_budget} samples but method {method_name!r} "
            f"would generate {budget} with these settings; fix one of them"
        )
    return budget

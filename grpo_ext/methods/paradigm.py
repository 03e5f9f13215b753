"""DeepSeekMath's unified paradigm (section 5.2.1, Table 10): every method is one gradient

    grad J_A(theta) = E[(q, o) ~ D] [ 1/|o| * sum_t GC_A(q, o, t, pi_rf) * grad log pi_theta(o_t | q, o_<t) ]

and differs from the others only in its data source ``D``, its reward function ``pi_rf`` and its gradient
coefficient ``GC``. Each method is described here once, as a :class:`Method`; the comparison report's paradigm
table is generated from :data:`METHODS` (:func:`paradigm_rows`, :func:`paradigm_markdown`). An online method
names its entry in the gradient-coefficient registry (:func:`grpo_ext.advantages.get_gradient_coefficient`, what
``GRPOExtConfig.advantage_mode`` selects); the name is checked when the method is created, so the table and the
code that trains cannot drift apart. The offline methods' coefficients are what their TRL trainers' losses imply
(SFT: cross-entropy, GC = 1; RFT: cross-entropy on the correct samples only, see
:func:`grpo_ext.methods.draws.rft_examples`; DPO: the sigmoid loss); the table describes them.

An entry also owns how it trains: its TRL config class, the function that builds its trainer
(:mod:`grpo_ext.methods.trainers`), how many sequences one example is, and the flags of the study's ``--quick``
rehearsal. A new method is one :func:`register_method` call (and its ``configs/methods/<name>.yaml``); nothing else
reads a method's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from grpo_ext.advantages import get_gradient_coefficient
from grpo_ext.batching import GRPO_LOSS_TYPES
from grpo_ext.errors import UserError
from grpo_ext.methods import trainers
from grpo_ext.report_format import md_header, md_row
from grpo_ext.validation import check_training_ranges

__all__ = [
    "BASE_RUN",
    "METHODS",
    "Method",
    "get_method",
    "paradigm_markdown",
    "paradigm_rows",
    "register_method",
]

#: The name of the starting checkpoint in a comparison (every method starts from it; it is not a method).
BASE_RUN = "base"


@dataclass(frozen=True)
class Method:
    """One fine-tuning method of the unified paradigm.

    Attributes:
        name: the registry key (``configs/methods/<name>.yaml``, ``--run <name>=...`` in ``evals/compare.py``).
        title: the name the paper uses.
        data_source: where the training pairs ``(q, o)`` come from.
        reward_function: ``pi_rf``, what scores an output (``-`` when there is none), the table's text.
        gradient_coefficient: ``GC(q, o, t, pi_rf)``, the weight of ``grad log pi_theta(o_t | q, o_<t)``.
        online: whether the outputs are sampled from the *current* policy during training.
        draws_samples: whether it trains on outputs sampled from a model (the base once, or the policy online)
            rather than on reference solutions: its run has a sampling budget, which must match across a comparison.
            None (the default): as ``online`` (an online method draws samples, an offline one by default trains on
            reference solutions).
        advantage_mode: the name of the gradient-coefficient registry entry that ``GRPOExtTrainer`` applies
            (online methods); None for the offline methods, whose coefficient is what the TRL trainer's loss
            implies (SFT: 1; DPO: the sigmoid of the implicit reward margin).
        trainer: the TRL trainer the runner is thin over (the table's text).
        runner: the name of the way it trains, shared by the methods that train alike (the online ones): the key of
            the study's cost rates (`grpo_ext.experiments.study.budget`) and ``--quick`` flags.
        build: ``build(ctx: RunContext) -> trainer`` (:mod:`grpo_ext.methods.trainers`), trained by
            :func:`grpo_ext.methods.runners.train_method`.
        config_class: ``() -> type``, the TRL config dataclass its config file is parsed into.
        sequences_per_example: sequences one training example is (a DPO pair: 2).
        loss_types: the ``loss_type`` values its config class takes (TRL's trainers only find an unknown one at the
            first loss); checked with the config's numbers by :meth:`check_config`.
        beta_positive: whether its config's ``beta`` must be > 0 (DPO: at 0 it learns nothing, below 0 it prefers
            the rejected answers); otherwise ``beta`` >= 0 (GRPO's KL coefficient may be 0). The study's search
            axes are checked against it.
        quick_flags, rehearsal_flags: what the study's ``--quick`` adds to a run of it (scripts/run_methods.py: the
            embedded base; a rehearsal on a tiny random model of a real base).

    The fields after ``runner`` are how it trains, not what it is: :meth:`description` leaves them out.
    """

    name: str
    title: str
    data_source: str
    reward_function: str
    gradient_coefficient: str
    online: bool
    advantage_mode: str | None
    trainer: str
    runner: str
    build: Callable[[Any], Any] = field(metadata={"how": True})
    config_class: Callable[[], type] = field(metadata={"how": True})
    draws_samples: bool | None = None
    sequences_per_example: int = field(default=1, metadata={"how": True})
    loss_types: tuple[str, ...] = field(default=(), metadata={"how": True})
    beta_positive: bool = field(default=False, metadata={"how": True})
    quick_flags: str = field(default="", metadata={"how": True})
    rehearsal_flags: str = field(default="", metadata={"how": True})

    def __post_init__(self):
        if self.draws_samples is None:
            object.__setattr__(self, "draws_samples", self.online)  # frozen: set once, here
        if self.online:
            if not self.draws_samples:
                raise ValueError(f"method {self.name!r}: an online method draws samples")
            if self.advantage_mode is None:
                raise ValueError(f"method {self.name!r}: an online method needs an advantage_mode (registry key)")
            try:
                get_gradient_coefficient(self.advantage_mode)
            except ValueError as err:
                raise ValueError(f"method {self.name!r}: not a registered gradient coefficient ({err})") from None
        elif self.advantage_mode is not None:
            raise ValueError(f"method {self.name!r}: an offline method has no advantage_mode")

    def check_config(self, training_args) -> None:
        """The numbers of its parsed training config in range, its ``loss_type`` among :attr:`loss_types` and its
        ``beta`` > 0 where :attr:`beta_positive`: a `UserError` naming the field."""
        check_training_ranges(training_args, loss_types=self.loss_types, beta_positive=self.beta_positive)

    def description(self) -> dict[str, Any]:
        """What the method is (the paradigm's fields), as a run's record keeps it (`method_run.json`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.metadata.get("how")}

    @property
    def draws_from_base(self) -> bool:
        """Whether its training outputs are drawn from the base model once, before training (RFT, DPO)."""
        return not self.online and self.draws_samples

    @property
    def samples_from(self) -> str:
        """Which model generates the training outputs."""
        if self.online:
            return "current policy (online)"
        return "base model, once (offline)" if self.draws_from_base else "none (reference solutions)"


METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add ``method`` to :data:`METHODS` (a name can be registered once)."""
    if method.name in METHODS or method.name == BASE_RUN:
        raise ValueError(f"method {method.name!r} is already registered")
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    """The method registered as ``name``; a ``UserError`` listing the known names."""
    try:
        return METHODS[name]
    except KeyError:
        raise UserError(f"unknown method {name!r}; known methods: {', '.join(METHODS)}") from None


# How each way of training runs (shared by the methods that train alike). The quick flags: 2 optimizer steps on 8 train
# prompts (scripts/run_methods.py adds those), budgets equal (32 samples). A rehearsal on a real base's tiny random
# model: every sample of a random model runs to its longest, so it samples 16 tokens everywhere (draws, GRPO's
# completions, learning curves and evaluations: a study's costs are its sampling steps) and its batches are smaller
# than the embedded model's (same equal budgets: 16 samples, 2 steps).
# TRL 1.16's SFTConfig.loss_type and DPOConfig.loss_type values (their help texts); GRPO's are grpo_ext.batching's.
SFT_LOSS_TYPES = ("nll", "dft", "chunked_nll")
DPO_LOSS_TYPES = (
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
)

_SFT = dict(
    trainer="trl.SFTTrainer",
    runner="sft",
    build=trainers.build_sft,
    config_class=trainers.sft_config,
    loss_types=SFT_LOSS_TYPES,
    quick_flags="--per_device_train_batch_size 16 --sample_budget 0",
    rehearsal_flags="--per_device_train_batch_size 4 --sample_budget 0 --sample_max_new_tokens 16 --curve_n 2",
)
_RFT = dict(
    trainer="trl.SFTTrainer",
    runner="rft",
    build=trainers.build_rft,
    config_class=trainers.sft_config,
    draws_samples=True,  # from the base model, once
    loss_types=SFT_LOSS_TYPES,
    quick_flags="--per_device_train_batch_size 16 --samples_per_prompt 4 --sample_max_new_tokens 32 --sample_budget 32",
    rehearsal_flags="--per_device_train_batch_size 4 --samples_per_prompt 2 --sample_max_new_tokens 16 "
    "--sample_budget 16 --curve_n 2",
)
_DPO = dict(
    trainer="trl.DPOTrainer",
    runner="dpo",
    build=trainers.build_dpo,
    config_class=trainers.dpo_config,
    draws_samples=True,  # from the base model, once
    loss_types=DPO_LOSS_TYPES,
    sequences_per_example=2,  # a (chosen, rejected) pair
    beta_positive=True,
    quick_flags="--per_device_train_batch_size 8 --samples_per_prompt 4 --sample_max_new_tokens 32 --sample_budget 32",
    rehearsal_flags="--per_device_train_batch_size 2 --samples_per_prompt 2 --sample_max_new_tokens 16 "
    "--sample_budget 16 --curve_n 2",
)
_ONLINE = dict(
    trainer="GRPOExtTrainer (trl.GRPOTrainer)",
    runner="online",
    build=trainers.build_online,
    config_class=trainers.grpo_config,
    loss_types=GRPO_LOSS_TYPES,
    quick_flags="--per_device_train_batch_size 16 --num_generations 4 --max_completion_length 32 "
    "--sample_max_new_tokens 32 --sample_budget 32 --curve_n 2",
    rehearsal_flags="--per_device_train_batch_size 8 --num_generations 4 --max_completion_length 16 "
    "--sample_max_new_tokens 16 --sample_budget 16 --curve_n 2",
)

# Notation: P_sft(Q, O) is the task's training set of questions with reference solutions; pi_sft is the starting
# (SFT'd) model, the embedded base model by default; pi_theta the policy being trained; pi_ref the frozen start.
register_method(
    Method(
        name="sft",
        title="SFT",
        data_source="q, o ~ P_sft(Q, O): the task's reference solutions",
        reward_function="-",
        gradient_coefficient="1",
        online=False,
        advantage_mode=None,
        **_SFT,
    )
)
register_method(
    Method(
        name="rft",
        title="RFT",
        data_source="q ~ P_sft(Q), o ~ pi_sft(O|q): sampled once from the base model",
        reward_function="rule (final answer)",
        gradient_coefficient="1 if o is correct else 0 (correct samples kept, deduplicated)",
        online=False,
        advantage_mode=None,
        **_RFT,
    )
)
register_method(
    Method(
        name="online_rft",
        title="Online RFT",
        data_source="q ~ P_sft(Q), o ~ pi_theta(O|q): sampled from the current policy",
        reward_function="rule (final answer)",
        gradient_coefficient="1 if o is correct else 0",
        online=True,
        advantage_mode="online_rft",
        **_ONLINE,
    )
)
register_method(
    Method(
        name="dpo",
        title="DPO",
        data_source="q ~ P_sft(Q), o+, o- ~ pi_sft(O|q): correct/incorrect pairs sampled once from the base model",
        reward_function="rule (final answer) picks o+ / o-",
        gradient_coefficient="sigma(beta log pi_theta/pi_ref (o-) - beta log pi_theta/pi_ref (o+)), "
        "+ on o+ tokens, - on o- tokens",
        online=False,
        advantage_mode=None,
        **_DPO,
    )
)
register_method(
    Method(
        name="grpo_outcome",
        title="GRPO (outcome supervision)",
        data_source="q ~ P_sft(Q), {o_i} ~ pi_theta_old(O|q): a group per question from the current policy",
        reward_function="rule (final answer), one reward per output",
        gradient_coefficient="A_i,t = (r_i - mean(r)) / std(r) over the group",
        online=True,
        advantage_mode="outcome",
        **_ONLINE,
    )
)
register_method(
    Method(
        name="grpo_process",
        title="GRPO (process supervision)",
        data_source="q ~ P_sft(Q), {o_i} ~ pi_theta_old(O|q): a group per question from the current policy",
        reward_function="rule-based step verifier, one reward per reasoning step (+ the outcome as a last step)",
        gradient_coefficient="A_i,t = sum over steps j ending at or after t of (r_j - mean) / std "
        "(all steps of the group)",
        online=True,
        advantage_mode="process",
        **_ONLINE,
    )
)

#: The columns of the paradigm table, in order: (header, attribute).
PARADIGM_COLUMNS = (
    ("method", "title"),
    ("data source", "data_source"),
    ("reward function", "reward_function"),
    ("gradient coefficient", "gradient_coefficient"),
    ("outputs sampled from", "samples_from"),
    ("advantage_mode", "advantage_mode"),
    ("trainer", "trainer"),
)


def paradigm_rows(names: list[str] | None = None) -> list[dict[str, str]]:
    """One row per method (``names`` in order, default all): ``{"name": ..., <header>: <text>, ...}``."""
    methods = [get_method(n) for n in names] if names is not None else list(METHODS.values())
    rows = []
    for method in methods:
        row = {"name": method.name}
        for header, attribute in PARADIGM_COLUMNS:
            value = getattr(method, attribute)
            row[header] = "-" if value is None else str(value)
        rows.append(row)
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def paradigm_markdown(names: list[str] | None = None) -> str:
    """The paradigm table (DeepSeekMath Table 10) as Markdown, generated from :data:`METHODS`."""
    headers = [h for h, _ in PARADIGM_COLUMNS]
    lines = md_header(headers, "l" * len(headers))
    for row in paradigm_rows(names):
        cells = [row[h] if h != "advantage_mode" or row[h] == "-" else f"`{row[h]}`" for h in headers]
        lines.append(md_row(_cell(c) for c in cells))
    return "\n".join(lines)

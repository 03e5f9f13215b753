"""DeepSeekMath's unified paradigm (section 5.2.1, Table 10): every method is one gradient

    grad J_A(theta) = E[(q, o) ~ D] [ 1/|o| * sum_t GC_A(q, o, t, pi_rf) * grad log pi_theta(o_t | q, o_<t) ]

and differs from the others only in its data source ``D``, its reward function ``pi_rf`` and its gradient
coefficient ``GC``. Each method is described here once, as a :class:`Method`; the comparison report's paradigm
table is generated from :data:`METHODS` (:func:`paradigm_rows`, :func:`paradigm_markdown`). An online method
names its entry in the gradient-coefficient registry (:func:`grpo_ext.advantages.get_gradient_coefficient`, what
``GRPOExtConfig.advantage_mode`` selects); the name is checked when the method is created, so the table and the
code that trains cannot drift apart. The offline methods' coefficients are what their TRL trainers' losses imply
(SFT: cross-entropy, GC = 1; RFT: cross-entropy on the correct samples only, see
:func:`grpo_ext.methods.runners.rft_examples`; DPO: the sigmoid loss); the table describes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_ext.advantages import get_gradient_coefficient
from grpo_ext.errors import UserError

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
        reward_function: ``pi_rf``, what scores an output (``-`` when there is none).
        gradient_coefficient: ``GC(q, o, t, pi_rf)``, the weight of ``grad log pi_theta(o_t | q, o_<t)``.
        online: whether the outputs are sampled from the *current* policy during training.
        advantage_mode: the name of the gradient-coefficient registry entry that ``GRPOExtTrainer`` applies
            (online methods); None for the offline methods, whose coefficient is what the TRL trainer's loss
            implies (SFT: 1; DPO: the sigmoid of the implicit reward margin).
        trainer: the TRL trainer the runner is thin over.
        runner: the runner in :mod:`grpo_ext.methods.runners` (``run_<runner>``).
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

    def __post_init__(self):
        if self.online:
            if self.advantage_mode is None:
                raise ValueError(f"method {self.name!r}: an online method needs an advantage_mode (registry key)")
            try:
                get_gradient_coefficient(self.advantage_mode)
            except ValueError as err:
                raise ValueError(f"method {self.name!r}: not a registered gradient coefficient ({err})") from None
        elif self.advantage_mode is not None:
            raise ValueError(f"method {self.name!r}: an offline method has no advantage_mode")

    @property
    def samples_from(self) -> str:
        """Which model generates the training outputs."""
        if self.online:
            return "current policy (online)"
        return "none (reference solutions)" if self.reward_function == "-" else "base model, once (offline)"


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
        trainer="trl.SFTTrainer",
        runner="sft",
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
        trainer="trl.SFTTrainer",
        runner="rft",
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
        trainer="GRPOExtTrainer (trl.GRPOTrainer)",
        runner="online",
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
        trainer="trl.DPOTrainer",
        runner="dpo",
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
        trainer="GRPOExtTrainer (trl.GRPOTrainer)",
        runner="online",
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
        trainer="GRPOExtTrainer (trl.GRPOTrainer)",
        runner="online",
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
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in paradigm_rows(names):
        cells = [row[h] if h != "advantage_mode" or row[h] == "-" else f"`{row[h]}`" for h in headers]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)

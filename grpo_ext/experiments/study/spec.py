"""A study as data (what :func:`grpo_ext.experiments.study.config.load_study` returns): arms, the evaluations, the
baselines that train nothing, and which run goes where; the picker. Pure: no training, no files written.

Run folders: ``<out>/runs/<arm>/<setting>/seed<k>``, ``<setting>`` a readable slug of the searched values
(``lr5e-05``, ``lr5e-05_beta0.1``); the base's evaluations are in ``<out>/base``, a baseline's in
``<out>/baselines/<name>``.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path

from grpo_ext.errors import UserError
from grpo_ext.evaluation.registry import PASS_AT_1, default_ks, headline_at, headline_forms
from grpo_ext.experiments.study.expectations import BASE, Expectation
from grpo_ext.experiments.study.start import Start
from grpo_ext.io import REPO_ROOT
from grpo_ext.methods.search_grid import pick_best  # the one picker, in the library (scripts/search.py's too)
from grpo_ext.validation import check_number

__all__ = [
    "AXIS_FIELDS",
    "Arm",
    "Baseline",
    "OBJECTIVES",
    "Evaluation",
    "Setting",
    "Signal",
    "Study",
    "evaluation_ks",
    "pick_best",
    "pick_settings",
]

#: The config field each search axis sets (``learning_rates`` is the shared axis).
AXIS_FIELDS = {"lr": "learning_rate", "beta": "beta"}
#: The dtypes a study evaluates in (``Evaluation.dtype``).
EVALUATION_DTYPES = ("float32", "bfloat16")


def evaluation_ks(n: int) -> list[int]:
    """The ks a study's evaluation reports for `n` samples a problem: the registry's rule, the powers of two up to n."""
    return default_ks(n, with_n=False)


@dataclass(frozen=True)
class Evaluation:
    """How runs are scored on one split (validation: the picks; test: the report).

    ``stop``: the strings a sample is cut at (lm-eval's ``until``); None = the task's own (``Task.stop_strings``, a
    new ``Question:`` for GSM8K-format tasks), ``()`` = none. ``dtype``: the weights' dtype at evaluation;
    ``bfloat16`` keeps a LoRA adapter unmerged beside its bf16 base, as it trained (merged into bf16 weights, a
    trained adapter's update survives only in part: benchmarks/results/lora_sampling.json measures the log-prob gap of
    both against PEFT's forward; the sampler's `LoraSampling` computes the unmerged product at the base's speed).
    ``n_by``: ``(name, n)`` pairs, a different number of samples a problem for
    the base, a baseline or an arm (e.g. n = 64 only where a K = 64 claim is judged); every other run draws ``n``.
    """

    split: str
    limit: int
    n: int
    temperature: float = 0.7
    metric: str = PASS_AT_1
    max_new_tokens: int = 48
    stop: tuple[str, ...] | None = None
    dtype: str = "float32"
    n_by: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (self.limit, self.n))
        if not numbers or self.limit < 1 or self.n < 1:
            raise UserError(f"{self.split}: limit and n must be numbers >= 1, got {self.limit}, {self.n}")
        check_number(f"{self.split}.temperature", self.temperature, low=0)
        for name, n in self.n_by:
            check_number(f"{self.split}.n_by.{name}", n, low=1, integer=True)
        if self.temperature == 0 and max(self.ns()) != 1:
            raise UserError(f"{self.split}.temperature: 0 (greedy) gives one sample a problem; got n = {self.n}")
        check_number(f"{self.split}.max_new_tokens", self.max_new_tokens, low=1, integer=True)
        if self.dtype not in EVALUATION_DTYPES:
            raise UserError(f"{self.split}.dtype: expected one of {', '.join(EVALUATION_DTYPES)}, got {self.dtype!r}")
        if self.stop is not None and not all(isinstance(s, str) and s for s in self.stop):
            raise UserError(f"{self.split}.stop: expected a list of non-empty strings, got {list(self.stop)!r}")
        self.check_metric(min(self.ns()))

    def ns(self) -> list[int]:
        """Every number of samples a problem this evaluation draws."""
        return [self.n, *(n for _, n in self.n_by)]

    def n_for(self, name: str) -> int:
        """Samples a problem for the run called `name` (an arm, ``base`` or a baseline)."""
        return dict(self.n_by).get(name, self.n)

    def check_metric(self, n: int) -> None:
        """`metric` is one the evaluation reports with `n` samples a problem (checked before any run trains)."""
        ks = evaluation_ks(n)
        picked = headline_at(self.metric)  # the registry's headline metrics (pass@k, maj@k) at a k
        if picked is None or picked[1] not in ks:
            raise UserError(
                f"{self.split}.metric: expected {headline_forms()} with k one of {ks} (n = {n}), got {self.metric!r}"
            )


@dataclass(frozen=True)
class Setting:
    """One point of an arm's search grid: axis name -> value (``lr`` always)."""

    values: tuple[tuple[str, float], ...]

    @property
    def slug(self) -> str:
        return "_".join(f"{name}{value:g}" for name, value in self.values)

    def as_dict(self) -> dict[str, float]:
        return dict(self.values)

    def flags(self) -> list[str]:
        """Command-line overrides of the method's config."""
        return [arg for name, value in self.values for arg in (f"--{AXIS_FIELDS[name]}", repr(value))]


@dataclass(frozen=True)
class Arm:
    name: str
    method: str
    overrides: dict = field(default_factory=dict)
    grid: dict[str, list[float]] = field(default_factory=dict)  # arm-specific axes (lr is the study's)
    rate_of: str | None = None  # the arm whose picked learning rate this one trains at (no lr search of its own)

    def settings(self, learning_rates: list[float]) -> list[Setting]:
        axes = {"lr": learning_rates, **self.grid}
        names = list(axes)
        return [Setting(tuple(zip(names, combo, strict=True))) for combo in itertools.product(*axes.values())]

    def flags(self) -> list[str]:
        out = []
        for key, value in self.overrides.items():
            out += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
        return out


@dataclass(frozen=True)
class Baseline:
    """The base model evaluated at another prompt, training nothing (e.g. 8 worked examples: the "no training"
    reference a reader asks for): `task_kwargs` override the study task's knobs; scored on validation and test like
    an arm, never trained. In a study with a `start`, the base is the start; ``raw_base`` scores the study's base
    model before its SFT instead (the context a reader asks for: where the start came from)."""

    name: str
    task_kwargs: dict = field(default_factory=dict)
    text: str = ""
    raw_base: bool = False  # with a study `start`: scored on the raw base (before the start's SFT), for context


#: The objectives a study's `signal` section may measure (the :mod:`.signal` package measures each).
OBJECTIVES = ("grpo", "sft")


@dataclass(frozen=True)
class Signal:
    """Stage 0 (issue 28): the learning signal at the base, before any budget is spent: the mean gradient cosine
    between `minibatches` independent minibatches at each samples a step of `samples`, for each objective, with the
    method config of `arm` (its task, group size, completion length, loss type, temperature); its own samples a
    step is one of `samples`. See :mod:`.signal.stage_zero`."""

    samples: tuple[int, ...]
    minibatches: int
    arm: str = "grpo_outcome"
    objectives: tuple[str, ...] = ("grpo", "sft")


@dataclass
class Study:
    arms: list[Arm]
    learning_rates: list[float]
    seeds: list[int]
    search_seed: int  # the first of search_seeds
    validation: Evaluation
    test: Evaluation
    base: str = "embedded"
    configs: str = "configs/methods"
    extensions: dict[str, dict] = field(default_factory=dict)
    expectations: dict[str, Expectation] = field(default_factory=dict)
    signal: Signal | None = None
    baselines: list[Baseline] = field(default_factory=list)
    budget: dict = field(default_factory=dict)  # the planning rates of the cost estimate (study.budget)
    search_seeds: tuple[int, ...] = ()  # every seed a search run is trained with (a pick is the mean over them)
    start: Start | None = None  # the SFT model every arm trains from (:mod:`.start`); None: the base itself
    checkpoint_steps: int = 10  # each run saves a checkpoint every this many steps, to resume from (0: none)

    def __post_init__(self):
        if not self.search_seeds:
            self.search_seeds = (self.search_seed,)

    @property
    def reference_label(self) -> str:
        """How reports name the run called ``base`` in the records: the model every arm starts from."""
        return self.start.label if self.start is not None else "base"

    @property
    def configs_dir(self) -> Path:
        """The folder of the method configs (`configs`, relative to the repository)."""
        return Path(self.configs) if Path(self.configs).is_absolute() else REPO_ROOT / self.configs

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise UserError(f"unknown arm {name!r}; the study has {', '.join(a.name for a in self.arms)}")

    def run_names(self) -> list[str]:
        """Every name a run of the study answers to: ``base``, the baselines, the arms."""
        return [BASE, *(b.name for b in self.baselines), *(a.name for a in self.arms)]

    def run_dir(self, out: str | Path, arm: Arm, setting: Setting, seed: int) -> Path:
        return Path(out) / "runs" / arm.name / setting.slug / f"seed{seed}"

    def grid(self, arm: Arm, picks: dict[str, Setting] | None = None) -> list[Setting]:
        """The settings `arm` is scored at on validation: every learning rate of the study, or, for a `rate_of` arm,
        its reference's picked rate (from `picks`) with the arm's own axes."""
        if arm.rate_of is None:
            return arm.settings(self.learning_rates)
        return arm.settings([picks[arm.rate_of].as_dict()["lr"]])

    def search_arms(self, picks: dict[str, Setting] | None = None) -> list[Arm]:
        """The arms of a search stage. Stage 1 (no `picks`): the arms that search their own rate. Stage 2 (`picks`
        of stage 1): the `rate_of` arms, at their reference's picked rate."""
        return [arm for arm in self.arms if (arm.rate_of is None) == (picks is None)]

    def search(self, picks: dict[str, Setting] | None = None) -> list[tuple[Arm, Setting, int]]:
        """The (arm, setting, search seed) runs scored on validation, every search seed of every setting of the
        stage's arms (:meth:`search_arms`). An arm whose grid is one setting has nothing to pick: it is not
        searched (its setting is its pick), so no budget goes to a run that decides nothing."""
        return [
            (arm, setting, seed)
            for arm in self.search_arms(picks)
            if len(grid := self.grid(arm, picks)) > 1
            for setting in grid
            for seed in self.search_seeds
        ]

    def searched(self, out: str | Path, picks: dict[str, Setting]) -> list[tuple[Arm, Setting, int]]:
        """The search runs a report reads: every (arm, setting, search seed) of both stages whose folder exists in
        `out`, the runs of :meth:`search` and any an earlier version of the study trained for an arm with one
        setting (the raw-base study's `rate_of` arms have them), in the study's order."""
        return [
            (arm, setting, seed)
            for arm in self.arms
            for setting in self.grid(arm, None if arm.rate_of is None else picks)
            for seed in self.search_seeds
            if self.run_dir(out, arm, setting, seed).is_dir()
        ]

    def test_runs(self, picks: dict[str, Setting]) -> list[tuple[Arm, Setting, int]]:
        """Every (arm, picked setting, seed) scored on test: every seed of `seeds` (none is the search seed), seed by
        seed (every arm's first seed, then every arm's second, ...): a study cut by a stop has a whole comparison at one
        seed before it has a second seed of any arm."""
        return [(arm, picks[arm.name], seed) for seed in self.seeds for arm in self.arms]

    def only(self, names: list[str]) -> Study:
        """The study with the arms `names` only (``--arms``); a `rate_of` arm needs its reference among them. The
        `signal` section goes with its arm: without it, a run trains at no batch size the signal was measured for."""
        arms = [self.arm(name) for name in names]
        kept = {arm.name for arm in arms}
        for arm in arms:
            if arm.rate_of is not None and arm.rate_of not in kept:
                raise UserError(
                    f"--arms: {arm.name} trains at {arm.rate_of}'s picked learning rate (rate_of); add {arm.rate_of}"
                )
        signal = self.signal if self.signal is not None and self.signal.arm in kept else None
        return dataclasses.replace(self, arms=arms, signal=signal)

    def trimmed(self, values_per_axis: int, seeds: int) -> Study:
        """The same arms with shorter grids and fewer test seeds (``--quick``; the search seed stays apart)."""
        arms = [dataclasses.replace(a, grid={k: v[:values_per_axis] for k, v in a.grid.items()}) for a in self.arms]
        return dataclasses.replace(
            self, arms=arms, learning_rates=self.learning_rates[:values_per_axis], seeds=self.seeds[:seeds]
        )


def pick_settings(scores: dict[str, dict[str, float]], settings: dict[str, list[Setting]]) -> dict[str, Setting]:
    """Each arm's setting with the highest validation score; ties go to the earlier setting of the grid.

    ``scores[arm][slug]`` is the validation metric of that setting (the mean over the search seeds). Only validation
    scores enter: the function is never given test numbers. An arm whose grid is one setting picks it unscored.
    """
    picks = {}
    for arm, grid in settings.items():
        if len(grid) == 1:  # nothing to pick (Study.search trains no run for it)
            picks[arm] = grid[0]
            continue
        missing = [s.slug for s in grid if s.slug not in scores.get(arm, {})]
        if missing:
            raise ValueError(f"arm {arm}: no validation score for {', '.join(missing)}")
        picks[arm] = grid[pick_best([s.slug for s in grid], scores[arm])]
    return picks

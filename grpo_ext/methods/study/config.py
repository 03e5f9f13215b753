"""A fair comparison as data: arms, the search every arm gets, the seeds, and which run goes where.

``configs/compare.yaml`` describes a *study*: each arm is a method of the unified paradigm plus config overrides;
every arm gets the same learning-rate search (plus arm-specific axes such as DPO's beta) trained with
``search_seed`` and scored on the validation split, except an arm with ``rate_of: <arm>``: it trains at that arm's
picked learning rate (its other axes are still searched, at that rate), so a family of extensions differs from its
reference by the extension alone, not by a rate that moves the model more or less. Each arm's best setting on
validation (its *pick*) is then trained with every test seed (``search_seed`` is none of them, so no search run is
reused as a test run) and evaluated on test. An optional ``signal`` section (:class:`Signal`) first measures the
learning signal at the base, the evidence the arms' batch size is chosen on. The functions here are pure (no
training, no files written): ``scripts/run_methods.py`` runs what they describe.

Run folders: ``<out>/runs/<arm>/<setting>/seed<k>``, ``<setting>`` a readable slug of the searched values
(``lr5e-05``, ``lr5e-05_beta0.1``). A folder is complete when it holds ``training_cost.json``; its evaluations are
``validation.json`` / ``test.json`` beside the model, each with its own resumable sample cache.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path

from grpo_ext.errors import UserError, read_yaml
from grpo_ext.io import REPO_ROOT
from grpo_ext.methods.paradigm import get_method
from grpo_ext.methods.study.expectations import BASE, Expectation, parse_expectations
from grpo_ext.validation import check_number

__all__ = [
    "Arm",
    "Evaluation",
    "Setting",
    "Signal",
    "Study",
    "evaluation_ks",
    "load_study",
    "pick_best",
    "pick_settings",
]

#: The config field each search axis sets (``learning_rates`` is the shared axis).
AXIS_FIELDS = {"lr": "learning_rate", "beta": "beta"}
#: The fields of an arm in the study YAML.
ARM_FIELDS = ("method", "overrides", "grid", "rate_of")
#: The fields of the study's `signal` section.
SIGNAL_FIELDS = ("arm", "samples", "minibatches", "objectives")


def evaluation_ks(n: int) -> list[int]:
    """The ks a study's evaluation reports for `n` samples a problem: the powers of two up to n."""
    return [2**i for i in range(11) if 2**i <= n]


@dataclass(frozen=True)
class Evaluation:
    """How runs are scored on one split (validation: the picks; test: the report)."""

    split: str
    limit: int
    n: int
    temperature: float = 0.7
    metric: str = "pass@1"
    max_new_tokens: int = 48

    def __post_init__(self):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (self.limit, self.n))
        if not numbers or self.limit < 1 or self.n < 1:
            raise UserError(f"{self.split}: limit and n must be numbers >= 1, got {self.limit}, {self.n}")
        check_number(f"{self.split}.temperature", self.temperature, low=0)
        if self.temperature == 0 and self.n != 1:
            raise UserError(f"{self.split}.temperature: 0 (greedy) gives one sample a problem; got n = {self.n}")
        check_number(f"{self.split}.max_new_tokens", self.max_new_tokens, low=1, integer=True)
        self.check_metric(self.n)

    def check_metric(self, n: int) -> None:
        """`metric` is one the evaluation reports with `n` samples a problem (checked before any run trains)."""
        name, _, k = str(self.metric).partition("@")
        ks = evaluation_ks(n)
        if name not in ("pass", "maj") or not k.isdigit() or int(k) not in ks:
            raise UserError(
                f"{self.split}.metric: expected pass@k or maj@k with k one of {ks} (n = {n}), got {self.metric!r}"
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
class Signal:
    """Stage 0 (issue 28): the learning signal at the base, before any budget is spent: the mean gradient cosine
    between `minibatches` independent minibatches at each samples a step of `samples`, for each objective, with the
    method config of `arm` (its task, group size, completion length, loss type, temperature); its own samples a
    step is one of `samples`. See :mod:`grpo_ext.methods.study.signal.stage`."""

    samples: tuple[int, ...]
    minibatches: int
    arm: str = "grpo_outcome"
    objectives: tuple[str, ...] = ("grpo", "sft")


@dataclass
class Study:
    arms: list[Arm]
    learning_rates: list[float]
    seeds: list[int]
    search_seed: int
    validation: Evaluation
    test: Evaluation
    base: str = "embedded"
    configs: str = "configs/methods"
    extensions: dict[str, dict] = field(default_factory=dict)
    expectations: dict[str, Expectation] = field(default_factory=dict)
    signal: Signal | None = None

    @property
    def configs_dir(self) -> Path:
        """The folder of the method configs (`configs`, relative to the repository)."""
        return Path(self.configs) if Path(self.configs).is_absolute() else REPO_ROOT / self.configs

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise UserError(f"unknown arm {name!r}; the study has {', '.join(a.name for a in self.arms)}")

    def run_dir(self, out: str | Path, arm: Arm, setting: Setting, seed: int) -> Path:
        return Path(out) / "runs" / arm.name / setting.slug / f"seed{seed}"

    def grid(self, arm: Arm, picks: dict[str, Setting] | None = None) -> list[Setting]:
        """The settings `arm` is scored at on validation: every learning rate of the study, or, for a `rate_of` arm,
        its reference's picked rate (from `picks`) with the arm's own axes."""
        if arm.rate_of is None:
            return arm.settings(self.learning_rates)
        return arm.settings([picks[arm.rate_of].as_dict()["lr"]])

    def search(self, picks: dict[str, Setting] | None = None) -> list[tuple[Arm, Setting, int]]:
        """The (arm, setting, search seed) runs scored on validation. Stage 1 (no `picks`): the arms that search
        their own rate. Stage 2 (`picks` of stage 1): the `rate_of` arms, at their reference's picked rate."""
        arms = [arm for arm in self.arms if (arm.rate_of is None) == (picks is None)]
        return [(arm, setting, self.search_seed) for arm in arms for setting in self.grid(arm, picks)]

    def test_runs(self, picks: dict[str, Setting]) -> list[tuple[Arm, Setting, int]]:
        """Every (arm, picked setting, seed) scored on test: every seed of `seeds` (none is the search seed)."""
        return [(arm, picks[arm.name], seed) for arm in self.arms for seed in self.seeds]

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


def _require(mapping: dict, key: str, where: str):
    if key not in mapping:
        raise UserError(f"{where}: missing `{key}`")
    return mapping[key]


def _numbers(data: dict, key: str, where: str, kind: type | None) -> list:
    """`data[key]`, a non-empty list of numbers: converted with `kind` (YAML reads `5e-5` as a string, which `float`
    takes), or kept as written (`kind` None: each must be a number already)."""
    values = _require(data, key, where)
    expected = f"`{key}` must be a non-empty list of numbers, got {values!r}"
    if not isinstance(values, list) or not values:
        raise UserError(f"{where}: {expected}")
    if kind is None:
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise UserError(f"{where}: {expected}")
        return list(values)
    try:
        return [kind(v) for v in values]
    except (TypeError, ValueError):
        raise UserError(f"{where}: {expected}") from None


def _mapping(value, where: str) -> dict:
    if not value:  # absent or empty
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a mapping, got {value!r}")
    return value


def _evaluation(data: dict, split_name: str, where: str) -> Evaluation:
    spec = dict(_mapping(_require(data, split_name, where), f"{where}: {split_name}"))
    spec.setdefault("split", split_name)
    known = [f.name for f in dataclasses.fields(Evaluation)]
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise UserError(f"{where}: {split_name}: unknown field(s) {unknown}; expected {', '.join(known)}")
    for key in ("limit", "n"):
        _require(spec, key, f"{where}: {split_name}")
    try:
        return Evaluation(**spec)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None


def _check_axis(axis: str, values: list, method: str | None, where: str) -> None:
    """A search axis's values in their field's range: learning rates > 0, DPO's beta > 0 (at 0 DPO learns nothing,
    below 0 it prefers the rejected answers), a GRPO beta >= 0."""
    field_name = AXIS_FIELDS[axis]
    positive = axis == "lr" or (method is not None and get_method(method).trainer == "trl.DPOTrainer")
    for value in values:
        try:
            check_number(field_name, value, low=0, low_open=positive)
        except UserError as err:
            raise UserError(f"{where}: {err}") from None


def _check_overrides(overrides: dict, method: str, axes: list[str], where: str) -> None:
    """An arm's overrides name fields of its method's config (in full: no abbreviation is expanded), and none that
    the search sets (its value would be replaced by the searched one without a word)."""
    from trl import ModelConfig

    from grpo_ext.methods.config import MethodArguments, config_class
    from grpo_ext.script_args import TaskArguments

    searched = {AXIS_FIELDS[axis]: axis for axis in axes}
    known = {
        f.name
        for cls in (MethodArguments, TaskArguments, config_class(method), ModelConfig)
        for f in dataclasses.fields(cls)
    }
    for key in overrides:
        if key in searched:
            source = "learning_rates" if searched[key] == "lr" else f"grid.{searched[key]}"
            raise UserError(f"{where}.{key}: the study searches {key} ({source}); set its values there")
        if key not in known:
            raise UserError(f"{where}: unknown field {key!r} for method {method!r} (not a field of its config)")


def _check_rates(arms: list[Arm], where: str) -> None:
    """Each `rate_of` names an arm of the study that searches its own rate (one level: a chain would pick one
    arm's rate from another's pick of yet another's)."""
    by_name = {arm.name: arm for arm in arms}
    for arm in arms:
        if arm.rate_of is None:
            continue
        reference = by_name.get(arm.rate_of)
        if reference is None:
            raise UserError(
                f"{where}: arms.{arm.name}.rate_of: unknown arm {arm.rate_of!r}; the study has {', '.join(by_name)}"
            )
        if reference.rate_of is not None:
            raise UserError(
                f"{where}: arms.{arm.name}.rate_of: {arm.rate_of} takes its own rate from {reference.rate_of} "
                "(rate_of); name an arm that searches its learning rate"
            )


def _positive_ints(spec: dict, key: str, where: str) -> tuple[int, ...]:
    """`spec[key]`: a non-empty list of distinct integers >= 1."""
    values = _numbers(spec, key, where, None)
    if not all(isinstance(v, int) and v >= 1 for v in values):
        raise UserError(f"{where}.{key}: expected integers >= 1, got {values!r}")
    if len(set(values)) < len(values):
        raise UserError(f"{where}.{key}: repeats {sorted({v for v in values if values.count(v) > 1})}; each once")
    return tuple(values)


def _signal(spec, arms: list[Arm], configs: Path, where: str) -> Signal | None:
    """The `signal` section: absent, none. The signal arm's own samples a step must be one of `samples` (the report
    marks the row the arms train at), and every size a whole number of its groups."""
    from grpo_ext.methods.study.signal import OBJECTIVES
    from grpo_ext.methods.study.signal.settings import arm_values

    if spec is None:
        return None
    spec = _mapping(spec, where)
    unknown = sorted(set(spec) - set(SIGNAL_FIELDS))
    if unknown:
        raise UserError(f"{where}: unknown field(s) {unknown}; expected {', '.join(SIGNAL_FIELDS)}")
    by_name = {arm.name: arm for arm in arms}
    arm = spec.get("arm", Signal.arm)
    if not isinstance(arm, str) or arm not in by_name:
        raise UserError(f"{where}.arm: unknown arm {arm!r}; the study has {', '.join(by_name)}")
    samples = _positive_ints(spec, "samples", where)
    minibatches = _require(spec, "minibatches", where)
    try:  # three minibatches at least: the jackknife's interval needs two degrees of freedom
        check_number(f"{where}.minibatches", minibatches, low=3, integer=True)
    except UserError as err:
        raise UserError(f"{err} (at least 3 for an interval)") from None
    objectives = spec.get("objectives", list(Signal.objectives))
    if not isinstance(objectives, list) or not objectives or not all(o in OBJECTIVES for o in objectives):
        raise UserError(f"{where}.objectives: expected a non-empty list of {', '.join(OBJECTIVES)}, got {objectives!r}")
    if len(set(objectives)) < len(objectives):
        raise UserError(f"{where}.objectives: repeats one of {objectives}; each once")
    try:
        values = arm_values(by_name[arm], configs)
    except UserError as err:
        raise UserError(f"{where}.{str(err).removeprefix('signal.')}") from None  # names the file
    if values["samples"] not in samples:
        raise UserError(
            f"{where}.samples: {list(samples)} lacks {values['samples']}, the samples a step {arm} trains at "
            "(per_device_train_batch_size x gradient_accumulation_steps); add it, so the report has the arms' row"
        )
    group = values["num_generations"]
    uneven = [n for n in samples if n % group] if "grpo" in objectives else []
    if uneven:
        raise UserError(f"{where}.samples: {uneven} not a multiple of {arm}'s group size {group} (num_generations)")
    return Signal(samples, minibatches, arm, tuple(objectives))


def load_study(path: str | Path) -> Study:
    """Parse and check a study YAML; a `UserError` names the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--study: no such file: {path}")
    data = read_yaml(path, "--study")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of study fields")
    arms = []
    for name, spec in _mapping(_require(data, "arms", str(path)), f"{path}: arms").items():
        where = f"{path}: arms.{name}"
        if not isinstance(spec, dict):
            raise UserError(f"{where}: expected a mapping with `method`")
        unknown = sorted(set(spec) - set(ARM_FIELDS))
        if unknown:
            raise UserError(f"{where}: unknown field(s) {unknown}; expected {', '.join(ARM_FIELDS)}")
        if name == BASE:
            raise UserError(f"{where}: `{BASE}` names the base model (in reports and expectations); rename the arm")
        method = _require(spec, "method", where)
        try:
            get_method(method)
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
        grid = _mapping(spec.get("grid"), f"{where}.grid")
        unknown = set(grid) - set(AXIS_FIELDS)
        if unknown:
            raise UserError(f"{where}.grid: unknown axis {sorted(unknown)}; searchable: {sorted(AXIS_FIELDS)}")
        grid = {k: _numbers(grid, k, f"{where}.grid", None) for k in grid}
        for axis, values in grid.items():
            _check_axis(axis, values, method, f"{where}.grid")
        overrides = dict(_mapping(spec.get("overrides"), f"{where}.overrides"))
        _check_overrides(overrides, method, ["lr", *grid], f"{where}.overrides")
        rate_of = spec.get("rate_of")
        if rate_of is not None and not isinstance(rate_of, str):
            raise UserError(f"{where}.rate_of: expected the name of an arm, got {rate_of!r}")
        if rate_of is not None and "lr" in grid:
            raise UserError(f"{where}.grid.lr: the arm trains at {rate_of}'s picked rate (rate_of); no lr axis here")
        arms.append(Arm(name, method, overrides, grid, rate_of))
    if not arms:
        raise UserError(f"{path}: `arms` is empty")
    _check_rates(arms, str(path))
    learning_rates = _numbers(data, "learning_rates", str(path), float)
    _check_axis("lr", learning_rates, None, str(path))
    seeds = _numbers(data, "seeds", str(path), None)  # as written: int() would make 0.5 seed 0
    search_seed = _require(data, "search_seed", str(path))
    for name, seed in [*(("seeds", s) for s in seeds), ("search_seed", search_seed)]:
        try:  # what TrainingArguments' seed takes: checked here, not after the whole search
            check_number(name, seed, low=0, high=2**32 - 1, integer=True)
        except UserError as err:
            raise UserError(f"{path}: {err}") from None
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:  # a seed counted twice would make "every seed agrees" count one run twice
        raise UserError(f"{path}: `seeds` repeats {repeated}; each seed once")
    if search_seed in seeds:  # a search run counted as a test run would let the pick's luck into the test numbers
        raise UserError(
            f"{path}: search_seed {search_seed} is one of seeds {seeds}; the search seed must be none of them"
        )
    evaluations = {split_name: _evaluation(data, split_name, str(path)) for split_name in ("validation", "test")}
    if evaluations["validation"].split == evaluations["test"].split:
        raise UserError(f"{path}: validation.split and test.split must differ (picks are never made on test)")
    study = Study(
        arms,
        learning_rates,
        seeds,
        search_seed,
        evaluations["validation"],
        evaluations["test"],
        str(data.get("base", "embedded")),
        str(data.get("configs", "configs/methods")),
        dict(_mapping(data.get("extensions"), f"{path}: extensions")),
        parse_expectations(
            data.get("expectations"),
            [a.name for a in arms],
            evaluation_ks(evaluations["test"].n),
            f"{path}: expectations",
        ),
    )
    study.signal = _signal(data.get("signal"), arms, study.configs_dir, f"{path}: signal")
    for name, ext in study.extensions.items():
        for role in ("arm", "against"):
            arm_name = _require(_mapping(ext, f"{path}: extensions.{name}"), role, f"{path}: extensions.{name}")
            try:
                study.arm(arm_name)  # an unknown arm name fails here, naming the arms
            except UserError as err:
                raise UserError(f"{path}: extensions.{name}.{role}: {err}") from None
    return study


def pick_best(slugs: list[str], scores: dict[str, float]) -> int:
    """The position in ``slugs`` (a grid, in order) of the highest validation score; ties go to the earlier setting.
    The one picker of the project: the study's arms and scripts/search.py's grid both pick with it."""
    return max(range(len(slugs)), key=lambda i: (scores[slugs[i]], -i))


def pick_settings(scores: dict[str, dict[str, float]], settings: dict[str, list[Setting]]) -> dict[str, Setting]:
    """Each arm's setting with the highest validation score; ties go to the earlier setting of the grid.

    ``scores[arm][slug]`` is the validation metric of that search run. Only validation scores enter: the function
    is never given test numbers.
    """
    picks = {}
    for arm, grid in settings.items():
        missing = [s.slug for s in grid if s.slug not in scores.get(arm, {})]
        if missing:
            raise ValueError(f"arm {arm}: no validation score for {', '.join(missing)}")
        picks[arm] = grid[pick_best([s.slug for s in grid], scores[arm])]
    return picks

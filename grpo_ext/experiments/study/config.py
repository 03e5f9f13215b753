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
from pathlib import Path

from grpo_ext.errors import UserError, read_yaml
from grpo_ext.experiments.study.expectations import BASE, parse_expectations
from grpo_ext.experiments.study.method_configs import arm_values
from grpo_ext.experiments.study.spec import (
    AXIS_FIELDS,
    OBJECTIVES,
    Arm,
    Baseline,
    Evaluation,
    Setting,
    Signal,
    Study,
    evaluation_ks,
    pick_best,
    pick_settings,
)
from grpo_ext.experiments.study.start import START_FIELDS, Start
from grpo_ext.methods.paradigm import get_method
from grpo_ext.run_folder import path_part
from grpo_ext.validation import check_number

__all__ = [
    "Arm",
    "Baseline",
    "Evaluation",
    "Setting",
    "Signal",
    "Study",
    "evaluation_ks",
    "load_study",
    "pick_best",
    "pick_settings",
]

#: The fields of an arm in the study YAML.
ARM_FIELDS = ("method", "overrides", "grid", "rate_of")
#: The fields of a baseline in the study YAML.
BASELINE_FIELDS = ("task_kwargs", "text", "raw_base")
#: The fields of the study's `signal` section.
SIGNAL_FIELDS = ("arm", "samples", "minibatches", "objectives")


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


def _check_fields(spec: dict, known, where: str) -> None:
    """`spec` names only `known` fields, else a `UserError` listing the unknown ones and the expected ones."""
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise UserError(f"{where}: unknown field(s) {unknown}; expected {', '.join(known)}")


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
    if spec.get("stop") is not None:  # YAML gives a list; the frozen Evaluation keeps a tuple
        if not isinstance(spec["stop"], list):
            raise UserError(f"{where}: {split_name}.stop: expected a list of strings (or null: the task's)")
        spec["stop"] = tuple(spec["stop"])
    spec["n_by"] = tuple(_mapping(spec.get("n_by"), f"{where}: {split_name}.n_by").items())
    try:
        return Evaluation(**spec)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None


def _check_axis(axis: str, values: list, method: str | None, where: str) -> None:
    """A search axis's values in their field's range: learning rates > 0, DPO's beta > 0 (at 0 DPO learns nothing,
    below 0 it prefers the rejected answers), a GRPO beta >= 0."""
    field_name = AXIS_FIELDS[axis]
    positive = axis == "lr" or (method is not None and get_method(method).beta_positive)
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
    if spec is None:
        return None
    spec = _mapping(spec, where)
    _check_fields(spec, SIGNAL_FIELDS, where)
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


def _baselines(spec, arms: list[Arm], where: str, with_start: bool) -> list[Baseline]:
    """The `baselines` section: name -> {task_kwargs, text, raw_base}; a name is none of base's or an arm's."""
    out = []
    for name, entry in _mapping(spec, where).items():
        at = f"{where}.{name}"
        path_part(name, at)  # the baseline's name is a folder under --out (baselines/<name>), never a path out of it
        entry = _mapping(entry, at)
        _check_fields(entry, BASELINE_FIELDS, at)
        if name == BASE or name in {a.name for a in arms}:
            raise UserError(f"{at}: the name {name!r} is taken (the base or an arm); rename the baseline")
        task_kwargs = _mapping(entry.get("task_kwargs"), f"{at}.task_kwargs")
        raw_base = entry.get("raw_base", False)
        if not isinstance(raw_base, bool):
            raise UserError(f"{at}.raw_base: expected true or false, got {raw_base!r}")
        if raw_base and not with_start:
            raise UserError(f"{at}.raw_base: only in a study with a `start` (without one, the base is the raw base)")
        if not task_kwargs and not raw_base:  # the base at the study's own prompt is `base` already
            raise UserError(f"{at}.task_kwargs: required; a baseline is the base at another prompt (e.g. num_fewshot)")
        out.append(Baseline(str(name), dict(task_kwargs), str(entry.get("text", "")), raw_base))
    return out


def _start(spec, where: str) -> Start | None:
    """The `start` section (:class:`~grpo_ext.experiments.study.start.Start`): the SFT model every arm trains from."""
    if spec is None:
        return None
    spec = _mapping(spec, where)
    _check_fields(spec, START_FIELDS, where)
    method = _require(spec, "method", where)
    try:
        if get_method(method).online:
            raise UserError(f"method {method!r} samples from the model it trains; the start is trained on fixed data")
    except UserError as err:
        raise UserError(f"{where}.method: {err}") from None
    rate = _require(spec, "learning_rate", where)
    _check_axis("lr", [rate], None, f"{where}.learning_rate")
    seed = spec.get("seed", 0)
    check_number(f"{where}.seed", seed, low=0, high=2**32 - 1, integer=True)
    overrides = dict(_mapping(spec.get("overrides"), f"{where}.overrides"))
    for key in ("learning_rate", "seed", "output_dir", "model_name_or_path", "train_offset"):
        if key in overrides:
            raise UserError(f"{where}.overrides.{key}: set by the study (the start's own field, or not settable)")
    label = spec.get("label", "SFT start")
    if not isinstance(label, str) or not label.strip():
        raise UserError(f"{where}.label: expected a non-empty name, got {label!r}")
    return Start(str(method), float(rate), int(seed), overrides, label)


def _checkpoint_steps(data: dict, where: str) -> int:
    """`checkpoint_steps`: every run saves a checkpoint every this many optimizer steps, the newest kept, so a run cut
    by a stop resumes from it (:mod:`.resume`); 0 saves none. Default 10."""
    value = data.get("checkpoint_steps", Study.checkpoint_steps)
    try:
        check_number("checkpoint_steps", value, low=0, integer=True)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None
    return int(value)


def _check_n_by(evaluations, names: list[str], where: str) -> None:
    """Every name of an evaluation's `n_by` is a run of the study (before the expectations are checked against it)."""
    for evaluation in evaluations:
        for name, _ in evaluation.n_by:
            if name not in names:
                raise UserError(f"{where}: {evaluation.split}.n_by.{name}: unknown run; expected one of {names}")


#: The top-level fields of a study YAML (what `load_study` reads).
STUDY_FIELDS = (
    "arms",
    "learning_rates",
    "seeds",
    "search_seed",
    "validation",
    "test",
    "base",
    "configs",
    "start",
    "baselines",
    "extensions",
    "expectations",
    "budget",
    "signal",
    "checkpoint_steps",
)


def load_study(path: str | Path) -> Study:
    """Parse and check a study YAML; a `UserError` names the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--study: no such file: {path}")
    data = read_yaml(path, "--study")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of study fields")
    unknown = sorted(str(key) for key in set(data) - set(STUDY_FIELDS))
    if unknown:  # `learning_rate:` for `learning_rates:` would run the study at the default rates
        raise UserError(f"{path}: unknown field(s) {unknown}; expected {', '.join(STUDY_FIELDS)}")
    arms = []
    for name, spec in _mapping(_require(data, "arms", str(path)), f"{path}: arms").items():
        where = f"{path}: arms.{name}"
        path_part(name, where)  # the arm's name is a folder under --out (runs/<arm>/...), never a path out of it
        if not isinstance(spec, dict):
            raise UserError(f"{where}: expected a mapping with `method`")
        _check_fields(spec, ARM_FIELDS, where)
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
    # one search seed, or several (each setting's validation score is then the mean over them)
    search_seeds = _require(data, "search_seed", str(path))
    search_seeds = list(search_seeds) if isinstance(search_seeds, list) else [search_seeds]
    if not search_seeds or len(set(map(str, search_seeds))) != len(search_seeds):
        raise UserError(f"{path}: search_seed: expected a seed or a list of distinct seeds, got {search_seeds!r}")
    search_seed = search_seeds[0]
    for name, seed in [*(("seeds", s) for s in seeds), *(("search_seed", s) for s in search_seeds)]:
        try:  # what TrainingArguments' seed takes: checked here, not after the whole search
            check_number(name, seed, low=0, high=2**32 - 1, integer=True)
        except UserError as err:
            raise UserError(f"{path}: {err}") from None
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:  # a seed counted twice would make "every seed agrees" count one run twice
        raise UserError(f"{path}: `seeds` repeats {repeated}; each seed once")
    for seed in search_seeds:  # a search run counted as a test run would let the pick's luck into the test numbers
        if seed in seeds:
            raise UserError(f"{path}: search_seed {seed} is one of seeds {seeds}; a search seed must be none of them")
    evaluations = {split_name: _evaluation(data, split_name, str(path)) for split_name in ("validation", "test")}
    if evaluations["validation"].split == evaluations["test"].split:
        raise UserError(f"{path}: validation.split and test.split must differ (picks are never made on test)")
    start = _start(data.get("start"), f"{path}: start")
    baselines = _baselines(data.get("baselines"), arms, f"{path}: baselines", start is not None)
    _check_n_by(evaluations.values(), [BASE, *(b.name for b in baselines), *(a.name for a in arms)], str(path))
    test = evaluations["test"]
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
            evaluation_ks(max(test.ns())),
            f"{path}: expectations",
            baselines=[b.name for b in baselines],
            n_for=test.n_for,
        ),
        baselines=baselines,
        budget=dict(_mapping(data.get("budget"), f"{path}: budget")),
        search_seeds=tuple(search_seeds),
        start=start,
        checkpoint_steps=_checkpoint_steps(data, str(path)),
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

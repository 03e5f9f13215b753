"""Functions behind the grpo-ext lm-eval tasks (``--include_path evals/lm_eval_tasks``), for any registered task.

- ``task_dataset``: the ``custom_dataset`` loader. lm-eval calls it with the task's ``metadata`` (the YAML's, plus
  ``--metadata '{...}'`` from the command line, plus the model args) and its ``dataset_kwargs``. ``grpo_ext_task``
  names the task (a :data:`grpo_ext.tasks.TASKS` name, built by :func:`grpo_ext.tasks.get_task`); the task's knobs
  (its constructor's arguments) are picked from the rest, and other keys are ignored. ``n``: the first n problems
  (default: the task's ``harness_defaults.limit``); ``split`` (default ``test``); ``prompt_fewshot``: the task's
  ``num_fewshot`` (lm-eval's own ``--num_fewshot`` is not used); ``$GRPO_EXT_<TASK>_DATA_FILES`` wins over a
  ``data_files`` knob.
- ``keep_all_samples``: a ``custom`` filter that hands every one of the ``repeats`` generations of a document to
  ``process_results`` (lm-eval's default ``take_first`` filter would keep one), each cut before its task's first stop
  string (:attr:`Task.stop_strings`, cut as the harness cuts: :func:`grpo_ext.sampler.stops.cut_at_stop`). A
  YAML's ``until`` is its task's stop strings, so lm-eval has stopped and cut there already; the filter makes a task
  named another way (``--metadata '{"grpo_ext_task": ...}'`` over another task's YAML) scored on the same text.
- ``process_results``: the metrics a model card lists (the registry's, :mod:`grpo_ext.evaluation.registry`: pass@k and
  maj@k) of one document from its N generations, scored as the harness scores a problem
  (:func:`grpo_ext.evaluation.scoring.score_problem`); lm-eval averages them over documents. Only k <= N are reported.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys

from datasets import DatasetDict

from grpo_ext.errors import UserError, one_line
from grpo_ext.evaluation.registry import default_ks, headline_entries
from grpo_ext.evaluation.scoring import score_problem
from grpo_ext.sampler.stops import cut_at_stop
from grpo_ext.tasks import TASKS, Task, get_task

#: The largest k the YAMLs' metric_list names (their `repeats`: 16).
MAX_K = 16
#: The k of the reported metrics, by the registry's rule (powers of two); each metric at each k is in `metric_list()`.
KS = tuple(default_ks(MAX_K, with_n=False))
#: The metrics reported: the registry's headline metrics (pass@k, maj@k), one value per k.
REPORTED = headline_entries()
#: The metadata key naming the task, and the column that carries it in every document (see ``process_results``).
TASK_KEY = "grpo_ext_task"


def data_files_env(task: str) -> str:
    """The environment variable with a local data file for ``task`` (``GRPO_EXT_GSM8K_DATA_FILES``)."""
    return f"GRPO_EXT_{task.upper()}_DATA_FILES"


# ---- datasets ------------------------------------------------------------------------------------------------------


def task_knobs(name: str, metadata: dict) -> dict:
    """The task's constructor arguments found in ``metadata`` (lm-eval mixes in its own keys and the model args)."""
    if name not in TASKS:
        get_task(name)  # the registry's error, naming the known tasks
    accepted = [
        p.name
        for p in inspect.signature(TASKS[name].__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    knobs = {key: metadata[key] for key in accepted if key in metadata}
    if "prompt_fewshot" in metadata and "num_fewshot" in accepted:
        shots = metadata["prompt_fewshot"]
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:  # int() would make 1.5 one shot
            raise UserError(f"prompt_fewshot: expected an integer >= 0, got {shots!r}")
        knobs["num_fewshot"] = shots
    if os.environ.get(data_files_env(name)) and "data_files" in accepted:
        knobs["data_files"] = os.environ[data_files_env(name)]
    return knobs


def task_dataset(**metadata) -> DatasetDict:
    """The ``test`` split lm-eval reads: the named task's ``split`` (first ``n`` problems), each row tagged with the
    task that made it. Bad metadata (an unknown task, a knob out of range) ends lm-eval with one line and exit code 2,
    as grpo-ext's own command lines do: lm-eval would print our traceback."""
    try:
        return _task_dataset(**metadata)
    except UserError as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        raise SystemExit(2) from None


def _task_dataset(**metadata) -> DatasetDict:
    if TASK_KEY not in metadata:
        raise UserError(f"lm-eval task metadata has no {TASK_KEY!r}: the name of the grpo-ext task to evaluate")
    name = metadata[TASK_KEY]
    knobs = task_knobs(name, metadata)
    task = get_task(name, **knobs)
    n = metadata.get("n", task.harness_defaults.limit)
    data = task.load(metadata.get("split", "test"), None if n is None else int(n))
    # process_results is given the document and the generations only: the document says which task scores it
    spec = json.dumps({"task": name, "task_kwargs": knobs}, sort_keys=True)
    return DatasetDict({"test": data.add_column(TASK_KEY, [spec] * len(data))})


@functools.cache  # one task per spec: process_results runs once a document
def _task(spec: str) -> Task:
    parsed = json.loads(spec)
    return get_task(parsed["task"], **parsed["task_kwargs"])


# ---- filter --------------------------------------------------------------------------------------------------------


def keep_all_samples(resps, docs):
    """Each document keeps the list of all its generations, each cut before its task's first stop string (a
    document without a task, none)."""
    stops = [_task(doc[TASK_KEY]).stop_strings if TASK_KEY in doc else () for doc in docs]
    return [[cut_at_stop(g, stop) for g in r] for r, stop in zip(resps, stops, strict=True)]


# ---- metrics -------------------------------------------------------------------------------------------------------


def sample_metrics(task: Task, generations: list[str], doc: dict, ks=KS) -> dict[str, float]:
    """The reported metrics of one problem at every k <= N, from the per-problem record the harness would keep."""
    n = len(generations)
    ks = [k for k in ks if k <= n]
    record = score_problem(task, {"problem_id": None, **doc}, generations, ks)  # lm-eval's documents have no id
    return {m.at(k): float(m.per_problem(n, [record], str(k))[0]) for m in REPORTED for k in ks}


def metric_list() -> list[dict]:
    """The YAMLs' ``metric_list`` as the registry makes it (lm-eval reads a static YAML: a test keeps the two equal)."""
    return [{"metric": m.at(k), "aggregation": "mean", "higher_is_better": True} for m in REPORTED for k in KS]


def _generations(results) -> list[str]:
    """lm-eval passes one entry per request; with ``keep_all_samples`` it is the list of N generations."""
    (generations,) = results
    return [generations] if isinstance(generations, str) else list(generations)


def process_results(doc: dict, results) -> dict[str, float]:
    return sample_metrics(_task(doc[TASK_KEY]), _generations(results), doc)

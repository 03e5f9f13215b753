"""Functions behind the grpo-ext lm-eval tasks (``--include_path evals/lm_eval_tasks``).

- ``*_dataset``: ``custom_dataset`` loaders. lm-eval calls them with the task's ``metadata`` (the YAML's, plus
  ``--metadata '{...}'`` from the command line, plus the model args) and its ``dataset_kwargs``; each picks the
  keys it knows and ignores the rest.
- ``keep_all_samples``: a ``custom`` filter that hands every one of the ``repeats`` generations of a document to
  ``process_results`` (lm-eval's default ``take_first`` filter would keep one).
- ``process_results_*``: pass@k and maj@k of one document from its N generations, computed with
  ``grpo_ext.evaluation.metrics`` (the same functions as ``evals/passk_majk.py``); lm-eval averages them over
  documents. Only k <= N are reported.
"""

from __future__ import annotations

import os

from datasets import DatasetDict

from grpo_ext.evaluation.metrics import maj_at_k, pass_at_k
from grpo_ext.tasks.arithmetic import ArithmeticTask
from grpo_ext.tasks.base import Task
from grpo_ext.tasks.gsm8k import GSM8KTask

#: The k of pass@k and maj@k; each k must also be listed in the YAML's metric_list.
KS = (1, 2, 4, 8, 16)
#: Environment variable with a local GSM8K file (openai/gsm8k format); wins over the YAML's data_files.
GSM8K_DATA_ENV = "GRPO_EXT_GSM8K_DATA_FILES"

_ARITHMETIC_KNOBS = ("min_operands", "max_operands", "digits", "operators", "seed", "test_percent")


# ---- datasets ------------------------------------------------------------------------------------------------------


def arithmetic_dataset(**kwargs) -> DatasetDict:
    """The embedded task's test split: ``n`` problems (default 200) built with the arithmetic knobs in kwargs."""
    task = ArithmeticTask(**{k: kwargs[k] for k in _ARITHMETIC_KNOBS if k in kwargs})
    return DatasetDict({"test": task.load("test", int(kwargs.get("n", 200)))})


def gsm8k_dataset(**kwargs) -> DatasetDict:
    """GSM8K ``test`` split from $GRPO_EXT_GSM8K_DATA_FILES, else ``data_files``, else the hub (openai/gsm8k)."""
    data_files = os.environ.get(GSM8K_DATA_ENV) or kwargs.get("data_files")
    task = GSM8KTask(data_files=data_files, num_fewshot=int(kwargs.get("prompt_fewshot", 0)))
    n = kwargs.get("n")
    return DatasetDict({"test": task.load(kwargs.get("split", "test"), None if n is None else int(n))})


# ---- filter --------------------------------------------------------------------------------------------------------


def keep_all_samples(resps, docs):
    """Identity filter: each document keeps the list of all its generations."""
    return [list(r) for r in resps]


# ---- metrics -------------------------------------------------------------------------------------------------------


def sample_metrics(task: Task, generations: list[str], reference: str, ks=KS) -> dict[str, float]:
    """pass@k and maj@k of one problem from its generations: our estimators, exact, for every k <= N."""
    answers = [task.extract_answer(g) for g in generations]
    correct = [task.is_correct(g, reference) for g in generations]
    n, c = len(generations), sum(correct)
    out: dict[str, float] = {}
    for k in ks:
        if k <= n:
            out[f"pass@{k}"] = pass_at_k(n, c, k)
            out[f"maj@{k}"] = maj_at_k(answers, correct, k)
    return out


def _generations(results) -> list[str]:
    """lm-eval passes one entry per request; with ``keep_all_samples`` it is the list of N generations."""
    (generations,) = results
    return [generations] if isinstance(generations, str) else list(generations)


_ARITHMETIC = ArithmeticTask()
_GSM8K = GSM8KTask()


def process_results_arithmetic(doc: dict, results) -> dict[str, float]:
    return sample_metrics(_ARITHMETIC, _generations(results), doc["answer"])


def process_results_gsm8k(doc: dict, results) -> dict[str, float]:
    return sample_metrics(_GSM8K, _generations(results), doc["answer"])

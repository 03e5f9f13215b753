"""Pass@K vs Maj@K for one model on one task: sample (through the resumable cache), score, summarise.

``evaluate_model`` draws ``params.n`` completions per problem, or only the ``(problem, sample_index)`` pairs the
cache does not hold yet. Each problem is scored as soon as its ``n`` samples are in, with the task's checker
(``task.is_correct`` for the verdict, ``task.extract_answer`` for the answer key that votes in maj@k), into a
record of counts (:mod:`grpo_ext.evaluation.scoring`); its completions are then let go. The result holds the means
over problems of the unbiased pass@k and pass^k, the exact maj@k (:mod:`grpo_ext.evaluation.metrics`), Cover@tau
and answer diversity, and every problem's record (intervals and model comparisons are computed from those:
:mod:`grpo_ext.evaluation.analysis`).

k larger than n: pass@k and maj@k need k of the n samples, so such a k cannot be estimated. The harness drops it
with a warning that is also recorded in the result (``dropped_ks``, ``warnings``) rather than failing a long run
(a training callback with a small n, a list of k shared between runs); if no k is left it is an error. The
command line (``evals/passk_majk.py``) is stricter and rejects k > n before sampling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from tqdm.auto import tqdm

from grpo_ext.errors import UserError
from grpo_ext.evaluation.backends import Backend
from grpo_ext.evaluation.cache import SampleCache, prompt_key, task_id_for
from grpo_ext.evaluation.excerpt import excerpt_rows
from grpo_ext.evaluation.scoring import DEFAULT_TAUS, check_taus, score_problem, summarize
from grpo_ext.sampler.sampling import SamplingParams, derive_seed
from grpo_ext.tasks.base import Task

logger = logging.getLogger(__name__)

__all__ = [
    "check_ks",
    "check_problems_fit",
    "check_stops_writable",
    "evaluate_model",
    "load_problems",
    "score_samples",
    "validate_problems",
]


def check_ks(ks: Iterable[int], n: int) -> tuple[list[int], list[int]]:
    """``(kept, dropped)``: the distinct ks sorted, split at ``n``. A k < 1 or a non-integer is an error."""
    ks = list(ks)
    if not ks:
        raise UserError("ks is empty: give at least one k (e.g. 1,2,4,8)")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(f"every k must be an integer >= 1, got {k!r}")
    ks = sorted({int(k) for k in ks})
    return [k for k in ks if k <= n], [k for k in ks if k > n]


def load_problems(task: Task, split: str = "test", limit: int | None = None) -> list[dict]:
    """The task's problems as ``{"problem_id", "prompt", "answer"}`` dicts, validated, at most ``limit`` of them.

    An empty dataset, a row without a prompt and a row without a reference answer are errors naming the task,
    the split and the row.
    """
    if limit is not None and limit < 0:
        raise UserError(f"limit must be >= 0, got {limit}")
    source = f"task {task.name!r} split {split!r}"
    if limit == 0:
        raise UserError(f"{source}: limit=0 leaves no problems to evaluate")
    dataset = task.load(split, limit) if limit else task.load(split)
    rows = list(dataset)[:limit] if limit else list(dataset)
    return validate_problems(rows, task, source)


def validate_problems(rows: Sequence[dict], task: Task, source: str = "problems") -> list[dict]:
    """Rows with ``prompt`` and ``answer`` (and optionally ``problem_id``/``id``) as problem dicts with their slice
    ``attributes`` (:meth:`Task.problem_attributes` of the row, or the row's own ``attributes`` when it is a problem
    validated before); errors name ``source`` and the row."""
    if len(rows) == 0:
        raise UserError(f"{source}: the dataset is empty (no problems to evaluate)")
    problems = []
    for i, row in enumerate(rows):
        prompt, answer = row.get("prompt"), row.get("answer")
        conversation = (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt)
        )
        if not (isinstance(prompt, str) and prompt) and not conversation:
            raise UserError(
                f"{source}: row {i} has no prompt (a non-empty 'prompt' string or list of chat messages is required)"
            )
        if answer is None or (isinstance(answer, str) and not answer.strip()):
            raise UserError(f"{source}: row {i} has no reference answer ('answer' is {answer!r})")
        try:
            task.normalize_answer(str(answer))
        except Exception as err:  # noqa: BLE001 - any checker failure: name the row
            raise UserError(f"{source}: row {i} has an answer the task cannot read ({answer!r}: {err})") from None
        problem_id = row.get("problem_id", row.get("id", i))
        attributes = row.get("attributes")
        if not isinstance(attributes, dict):  # a dataset row: its columns are what the task reads them from
            try:
                attributes = task.problem_attributes(row)
            except Exception as err:  # noqa: BLE001 - any reader failure: name the row
                raise UserError(f"{source}: row {i}: the task cannot read its slice attributes ({err})") from None
        problems.append(
            {
                "problem_id": str(problem_id),
                "prompt": prompt,
                "answer": str(answer),
                "attributes": {str(k): str(v) for k, v in attributes.items()},
            }
        )
    ids = [p["problem_id"] for p in problems]
    if len(set(ids)) != len(ids):
        raise UserError(f"{source}: problem ids are not unique")
    return problems


def check_problems_fit(backend: Backend, problems: Sequence[dict], max_new_tokens: int, what: str) -> None:
    """Every problem's prompt, rendered and tokenized as the sampler feeds it, plus ``max_new_tokens`` fits in the
    model's positions, and the chat template renders every prompt; else one `UserError` naming ``what`` (the model
    flag), the problem and the lengths (:mod:`grpo_ext.prompt_fit`). A backend without a tokenizer and model in this
    process (vLLM) is not checked here: vLLM refuses an over-long prompt itself."""
    from grpo_ext.prompt_fit import check_prompts_fit, model_positions, rendering_prompts
    from grpo_ext.sampler.sampling import encode_prompt_ids

    tokenizer, model = getattr(backend, "tokenizer", None), getattr(backend, "model", None)
    if tokenizer is None or model is None or not problems:
        return
    with rendering_prompts(tokenizer, what):
        ids = encode_prompt_ids(tokenizer, [p["prompt"] for p in problems])
    check_prompts_fit(
        [len(row) for row in ids],
        max_new_tokens,
        model_positions(model),
        budget_name="--max-new-tokens",
        source=what,
        names=[f"problem id {p['problem_id']}" for p in problems],
    )


def check_stops_writable(backend: Backend, stops: Sequence[str], what: str) -> None:
    """Every stop string is one the model's tokenizer can write, as training requires (`grpo_ext.rollouts`): a string
    it encodes with its unknown token (`Question:` for the embedded model's digits-and-signs vocabulary) would never
    end a sample, and the run would report samples cut at the length cap as if the stop had been honoured. A backend
    without a tokenizer in this process (vLLM) is not checked here."""
    from grpo_ext.rollouts import _check_writable

    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None:
        return
    for stop in stops or ():
        try:
            _check_writable(stop, tokenizer)
        except UserError as err:
            reason = str(err).partition(": ")[2]
            raise UserError(f"--stop ({what}): {reason}; give a stop string it can write, or --stop none") from None


def score_samples(
    task: Task,
    problems: Sequence[dict],
    completions: Sequence[Sequence[str]],
    ks: Sequence[int],
    taus: Sequence[float] = DEFAULT_TAUS,
):
    """Scores of a full sample matrix (``completions[i]`` holds the n samples of ``problems[i]``).

    Returns ``(summary, per_problem)``: :func:`~grpo_ext.evaluation.scoring.summarize` of the records of
    :func:`~grpo_ext.evaluation.scoring.score_problem`. ``evaluate_model`` scores problem by problem instead, as
    samples arrive, and never holds a matrix.
    """
    ns = {len(c) for c in completions}
    if len(ns) != 1:
        raise ValueError(f"every problem needs the same number of samples; got {sorted(ns)}")
    memo: dict = {}
    per_problem = [score_problem(task, p, comps, ks, memo) for p, comps in zip(problems, completions, strict=True)]
    return summarize(per_problem, ns.pop(), ks, taus), per_problem


def _budget_counter(backend, task: Task, max_new_tokens: int) -> tuple[bool, Callable]:
    """``(known, hits)``: ``hits(completions)`` is one bool per completion, whether it used all ``max_new_tokens``
    (the anatomy's ``hit_budget``: an unfinished sample), or None (unknown). The backends return text only, so it is
    counted by re-tokenising the text with the backend's tokenizer (the transformers backend's, vLLM's engine's),
    for a task with an anatomy (a step verifier) only; samples read back from the cache are counted the same way, so
    a report is the same whether its samples were drawn or cached. A backend without a tokenizer: ``known`` False,
    and the anatomy cannot tell an unfinished sample from one that stopped without a number."""
    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None and hasattr(getattr(backend, "llm", None), "get_tokenizer"):
        tokenizer = backend.llm.get_tokenizer()
    if tokenizer is None or not task.has_step_verifier:
        return False, lambda completions: None

    def hits(completions: Sequence[str]) -> list[bool]:
        # one batched call per problem: the sampler stored the text without its end-of-sequence token
        ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        return [len(row) >= max_new_tokens for row in ids]

    return True, hits


def evaluate_model(
    backend: Backend,
    task: Task,
    params: SamplingParams,
    ks: Iterable[int],
    cache_path=None,
    limit: int | None = None,
    *,
    split: str = "test",
    problems: Sequence[dict] | None = None,
    task_id: str | None = None,
    progress: bool = True,
    taus: Sequence[float] = DEFAULT_TAUS,
) -> dict:
    """Pass@k, maj@k, pass^k, Cover@tau and answer diversity of ``backend``'s model on ``task`` (``limit`` problems
    of ``split``, or ``problems``).

    Samples go through the JSONL cache at ``cache_path`` (None: no cache): only missing ``(problem, sample)``
    pairs are drawn, a batch of ``params.batch_size`` prompts at a time, each batch appended durably. ``task_id``
    names the task in the cache (default :func:`~grpo_ext.evaluation.cache.task_id_for` without the task's knobs:
    pass ``task_id_for(name, split, task_kwargs)`` when they are set). Each problem is scored as soon as its ``n``
    samples are in (:func:`~grpo_ext.evaluation.scoring.score_problem`) and its completions are let go: this
    function never holds the sample matrix. ``taus``: the Cover@tau thresholds.
    Returns a JSON-ready dict (see the keys below); ks above ``params.n`` are dropped with a recorded warning.
    ``excerpt`` holds samples 0 and 1 of every problem (:mod:`grpo_ext.evaluation.excerpt`), which the report writes
    to ``samples_excerpt.jsonl`` and leaves out of ``report.json``. For a task with a step verifier every problem
    gets the anatomy's counts; ``anatomy_budget`` says whether "used all max_new_tokens" was known (``tokenizer``:
    counted by re-tokenising with the backend's tokenizer) or not (``unknown``: the backend has none).
    """
    taus = check_taus(taus)
    kept, dropped = check_ks(ks, params.n)
    warnings: list[str] = []
    if dropped:
        message = (
            f"k={','.join(map(str, dropped))} > n={params.n}: dropped (pass@k and maj@k need k of the n samples; "
            f"raise n to report them)"
        )
        logger.warning(message)
        warnings.append(message)
    if not kept:
        raise UserError(f"every k ({', '.join(map(str, dropped))}) exceeds n={params.n}: nothing to report")
    if problems is None:
        problems = load_problems(task, split, limit)
    else:
        problems = validate_problems(list(problems)[:limit] if limit else list(problems), task, f"task {task.name!r}")
    task_id = task_id or task_id_for(task.name, split)
    n, key = params.n, params.key()

    # A problem is scored once all n of its samples are in, then its completions are dropped: only counts stay.
    samples: list[dict[int, str] | None] = []
    scored: list[dict | None] = [None] * len(problems)
    excerpt: list[list[dict]] = [[] for _ in problems]
    memo: dict = {}  # maj@k by answer signature, shared by the problems of this run
    scoring_seconds = 0.0
    # the anatomy needs to know which samples used the whole budget: only then is the text re-tokenised
    budget_known, hits_of = _budget_counter(backend, task, params.max_new_tokens)

    def finish(pos: int) -> None:
        nonlocal scoring_seconds
        began = time.perf_counter()
        completions = [samples[pos][j] for j in range(n)]
        hits = hits_of(completions)
        scored[pos] = score_problem(task, problems[pos], completions, kept, memo, hit_budget=hits)
        excerpt[pos] = excerpt_rows(task, problems[pos], completions, hits)
        samples[pos] = None
        scoring_seconds += time.perf_counter() - began

    # The cache keeps this run's group only and nothing of what is drawn (the run holds that itself); no cache path:
    # nothing is kept at all. Each problem's cached samples move out of the cache (popped) and, when all n are there,
    # are scored and let go at once: memory holds the samples of the problems not scored yet, no more.
    group = (backend.name, backend.fingerprint, task_id, key)
    cache = SampleCache(cache_path, only=group) if cache_path is not None else None
    cached = cache.lookup(*group) if cache is not None else {}
    from_cache = 0
    # Work units: (problem position, missing sample indices); problems missing the same indices are sampled in one
    # call (the backend keeps its batch full across them), longest prompts first (less padding).
    units = []
    for pos, problem in enumerate(problems):
        have = cached.pop((problem["problem_id"], prompt_key(problem["prompt"])), {})
        samples.append({index: completion for index, completion in have.items() if 0 <= index < n})
        from_cache += len(samples[pos])
        units.append((pos, tuple(j for j in range(n) if j not in samples[pos])))
        if not units[-1][1]:
            finish(pos)
    ids = {p["problem_id"] for p in problems}
    # what is left of the group under this run's problem ids was drawn for other prompts
    stale = sum(len(v) for (pid, _), v in cached.items() if pid in ids)
    cached.clear()
    if stale:
        warnings.append(f"{stale} cached samples were drawn for another prompt under the same problem id: ignored")
        logger.warning(warnings[-1])
    units = [u for u in units if u[1]]
    units.sort(key=lambda u: (u[1], -len(prompt_key(problems[u[0]]["prompt"]))))
    groups: dict[tuple[int, ...], list[int]] = {}
    for pos, missing in units:
        groups.setdefault(missing, []).append(pos)
    to_draw = sum(len(missing) for _, missing in units)
    start, scored_before = time.perf_counter(), scoring_seconds
    bar = tqdm(total=to_draw, desc=f"sampling {backend.name}", unit="sample", disable=not progress or not to_draw)

    def save(records: list[dict]) -> None:
        if cache is not None:
            cache.append(records, remember=False)
        bar.update(len(records))

    try:
        for missing, positions in groups.items():
            # A problem's first draw uses the run's seed; redrawing a few indices uses a seed of its own so the
            # new samples are not copies of the old ones' random stream.
            call_params = (
                params
                if len(missing) == n
                else params.replace(n=len(missing), seed=derive_seed(params.seed, "redraw", *missing))
            )
            prompts = [problems[pos]["prompt"] for pos in positions]
            records, done = [], set()
            for j, completions in backend.generate_stream(prompts, call_params):
                if not 0 <= j < len(prompts) or j in done or len(completions) != len(missing):
                    raise RuntimeError(
                        f"backend {backend.name!r} returned {len(completions)} completions for prompt {j} of "
                        f"{len(prompts)} (expected {len(missing)} each, once)"
                    )
                done.add(j)
                pos = positions[j]
                for index, completion in zip(missing, completions, strict=True):
                    samples[pos][index] = completion
                    records.append(
                        {
                            "model": backend.name,
                            "model_fingerprint": backend.fingerprint,
                            "task": task_id,
                            "problem_id": problems[pos]["problem_id"],
                            "sample_index": index,
                            "params": key,
                            "prompt": problems[pos]["prompt"],
                            "completion": completion,
                        }
                    )
                finish(pos)
                if len(records) >= params.batch_size * len(missing):  # durable every batch_size problems
                    save(records)
                    records = []
            save(records)
            if len(done) != len(prompts):
                raise RuntimeError(f"backend {backend.name!r} returned {len(done)} of {len(prompts)} prompts")
    finally:
        bar.close()
    # sampling only: the problems scored while drawing are timed apart
    seconds = time.perf_counter() - start - (scoring_seconds - scored_before)

    if any(record is None for record in scored):  # every unit was drawn and checked above: a bug if not
        raise RuntimeError(f"{sum(r is None for r in scored)} problems were never scored")
    summary = summarize(scored, n, kept, taus)
    budget = {"anatomy_budget": "tokenizer" if budget_known else "unknown"} if task.has_step_verifier else {}
    return {
        "model": backend.name,
        "model_fingerprint": backend.fingerprint,
        "backend": backend.backend_name,
        "task": task.name,
        "task_id": task_id,
        "split": split,
        "n_problems": len(problems),
        "n": n,
        "ks": kept,
        "dropped_ks": dropped,
        "warnings": warnings,
        "params": params.to_dict(),
        "params_key": key,
        "taus": taus,
        "strict_form": task.strict_form,
        **summary,
        **budget,
        "samples": {
            "total": len(problems) * n,
            "from_cache": from_cache,
            "generated": to_draw,
            "seconds": round(seconds, 3),
            "samples_per_second": round(to_draw / seconds, 1) if to_draw and seconds > 0 else None,
            "scoring_seconds": round(scoring_seconds, 3),
        },
        "per_problem": scored,
        "excerpt": [row for rows in excerpt for row in rows],
    }

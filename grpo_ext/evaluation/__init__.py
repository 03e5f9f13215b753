"""Evaluation harness: pass@k / maj@k (and pass^k, Cover@tau, answer diversity) of a model on a verifiable task.

Sampling (the generation engine itself is :mod:`grpo_ext.sampler`, which training's rollouts share):

- ``backends``: where samples come from (transformers, vLLM), ``load_backend``;
- ``cache``: the resumable JSONL sample cache (``SampleCache``, ``model_fingerprint``, ``task_id_for``).

Scoring and statistics:

- ``metrics``: pass@k, pass^k, Cover@tau, exact maj@k, answer diversity (pure functions, one problem or many);
- ``registry``: the metrics by name (``METRICS``), each with its per-problem function; ``metric_at`` reads a
  metric at a k (``pass@4``);
- ``majority``: the counting behind exact maj@k (two engines for one expectation);
- ``scoring``: one problem's samples -> its counts (``score_problem``); many problems' counts -> means
  (``summarize``);
- ``bootstrap``: intervals over problems, paired differences, the pass@k crossover, solved-set overlap;
- ``analysis``: a report's intervals and model-against-model comparisons from results' per-problem records
  (``analyze``, ``per_problem_values``, ``BootstrapSettings``).

Running and reporting:

- ``harness``: ``evaluate_model`` (sample through the cache, score problem by problem, summarise);
- ``report``: ``write_reports`` (report.md / report.json / passk_majk.png / per_problem_accuracy.png) and
  ``read_report``, the one reader of report.json;
- ``results``: ``EvalResult``, one result's metrics read by their registry names (``value(MAJ_AT_K.at(16))``);
- ``plots``: the report's figures as PNG bytes;
- ``callback``: the same metrics logged during training;
- ``cli``: what the harness's command lines (``evals/``) share.
"""

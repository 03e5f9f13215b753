"""Evaluation harness: pass@k / maj@k (and pass^k, Cover@tau, answer diversity) of a model on a verifiable task.

Sampling:

- ``sampling``: the transformers sampler (``SamplingParams``, ``sample``, ``sample_stream``), seeded per sample;
- ``continuous``: its continuous-batching decode loop (slots sharing one KV cache, shared prefill and prefixes);
- ``slot_cache``: that loop's KV cache (per-prompt prefill, per-slot windows, compaction);
- ``static_step``: the fixed-shape decode step for CUDA (``SamplingParams.decode``: whole-cache attention,
  power-of-two slot buckets, torch.compile / CUDA graphs);
- ``token_draws``: its token draws as pure functions (counter-based uniforms, inverse CDF): samples independent of
  batching;
- ``backends``: where samples come from (transformers, vLLM), ``load_backend``;
- ``cache``: the resumable JSONL sample cache (``SampleCache``, ``model_fingerprint``, ``task_id_for``).

Scoring and statistics:

- ``metrics``: pass@k, pass^k, Cover@tau, exact maj@k, answer diversity (pure functions, one problem or many);
- ``registry``: the metrics by name (``METRICS``), each with its per-problem function; ``metric_at("pass@4")``;
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
- ``results``: ``EvalResult``, one result's metrics read by their registry names (``value("maj@16")``);
- ``plots``: the report's figures as PNG bytes;
- ``callback``: the same metrics logged during training;
- ``cli``: what the harness's command lines (``evals/``) share.
"""

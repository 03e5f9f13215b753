"""Evaluation harness: pass@k / maj@k of a model on a verifiable task.

- ``sampling`` / ``continuous``: the transformers sampler (``SamplingParams``, continuous batching);
- ``backends``: where samples come from (transformers, vLLM), ``load_backend``;
- ``cache``: the resumable JSONL sample cache, ``task_id_for``;
- ``metrics``: pass@k, maj@k and friends (pure functions);
- ``harness``: ``evaluate_model`` (sample through the cache, score, summarise);
- ``report``: ``write_reports`` (report.md / report.json / passk_majk.png) and ``read_report``, its one reader;
- ``callback``: the same metrics logged during training;
- ``cli``: what the harness's command lines (``evals/``) share.
"""

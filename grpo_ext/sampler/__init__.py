"""The generation engine: many seeded samples per prompt from a transformers model, for training and evaluation.

A floor below both its users: training's rollouts (:mod:`grpo_ext.rollouts`, ``generation_backend: sampler``) and the
evaluation harness (:mod:`grpo_ext.evaluation`) draw through it, and sample ``i`` of a prompt is the same for both.
Nothing here imports the harness, the trainer or a task.

- ``sampling``: the front door (``SamplingParams``, ``sample``, ``sample_stream``, the seeds), falling back to
  ``generate`` where continuous batching cannot run;
- ``continuous``: continuous batching's entry point (``continuous_sample``) and its contract;
- ``decoder``: its decode loop (slots, rows that share a prefix, forks, admission, shrinking);
- ``slot_cache``: that loop's KV cache (per-prompt prefill, per-slot windows, compaction, a shared prompt prefix);
- ``static_step``: the fixed-shape decode step for CUDA (``SamplingParams.decode``: whole-cache attention,
  power-of-two slot buckets, torch.compile / CUDA graphs);
- ``decode_attention``: the CPU bf16 / fp16 decode attention over the slot cache's buffers (cascade over the
  shared prefix);
- ``token_draws``: the token draws as pure functions (counter-based uniforms, inverse CDF): samples independent of
  batching;
- ``stops``: stop strings (the incremental check while decoding, the cut after).

The modules are imported by name (``from grpo_ext.sampler.sampling import sample``): importing the package imports
neither torch nor transformers.
"""

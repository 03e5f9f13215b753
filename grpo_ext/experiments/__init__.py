"""The experiments: orchestration beside the library, never part of what a TRL user imports.

The library (everything else in ``grpo_ext``: the trainer and its config, the rewards, the evaluation harness, the
sampler, the hub export, the method registry and its runners in ``grpo_ext.methods``) trains and measures one run.
The experiments run many of them and write a verdict:

- :mod:`~grpo_ext.experiments.study`: the fair, tuned comparison of the methods (``make compare``, ``make
  real-study``; ``scripts/run_methods.py --study``);
- :mod:`~grpo_ext.experiments.compare`: a set of trained checkpoints compared under the unified paradigm
  (``evals/compare.py``);
- :mod:`~grpo_ext.experiments.iterative`: iterative RL with the reward model retrained on policy samples
  (``scripts/iterative.py``);
- :mod:`~grpo_ext.experiments.workers`: pool workers that end with the experiment that started them.

The rule (``tests/test_layers.py``): the experiments import the library, the library never imports the experiments;
``scripts/``, ``evals/``, ``benchmarks/`` and ``tests/`` may import both. This package imports nothing.
"""

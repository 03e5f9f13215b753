"""Compare trained methods: the paradigm table beside pass@1 / maj@k / pass@k, training cost and the paper's findings.

- :mod:`~grpo_ext.experiments.compare.runs`: the runs (``--run NAME=PATH``), their files, matching their settings;
- :mod:`~grpo_ext.experiments.compare.findings`: statistics over seeds and the paper's findings with a verdict;
- :mod:`~grpo_ext.experiments.compare.render`: ``report.md``, ``report.json`` and the two plots;
- :mod:`~grpo_ext.experiments.compare.evaluate`: one comparison end to end (evaluate every run, write the report);
- :mod:`~grpo_ext.experiments.compare.cli`: the command line of ``evals/compare.py``, also called by
  ``scripts/run_methods.py``.

Every run must be evaluated with the same sampling settings (task, problems, n, temperature, top_p, max tokens,
seed): results evaluated differently are refused, or with ``allow_mixed_settings`` reported under a warning
naming the differences.

Import from the modules (``from grpo_ext.experiments.compare.runs import Run``): this package imports nothing, so the
command line's ``--help`` answers at once.
"""

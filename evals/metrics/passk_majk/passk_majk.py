"""pass@k and maj@k as a Hugging Face `evaluate` metric, computed with grpo_ext.evaluation.metrics.

Load it by path (works offline): ``evaluate.load("evals/metrics/passk_majk")``.

    metric = evaluate.load("evals/metrics/passk_majk")
    metric.compute(
        predictions=[["12", "12", "7", None], ["3", "4", "4", "4"]],   # answer keys of each problem's samples
        references=["12", "4"],                                        # reference answer of each problem
        k=[1, 4],
    )
    # {'pass@1': ..., 'pass@4': ..., 'maj@1': ..., 'maj@4': ...}
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

from grpo_ext.evaluation.metrics import maj_at_k_many, pass_at_k
from grpo_ext.evaluation.registry import METRICS, default_ks

# The registry's entries, for the names of what this module reports (pass@k, maj@k); it scores answer keys, not the
# harness's records, so it computes them itself with the same functions.
PASS_AT_K, MAJ_AT_K = METRICS["pass@k"], METRICS["maj@k"]

_DESCRIPTION = """\
pass@k (unbiased estimator of Chen et al. 2021: 1 - C(n-c, k) / C(n, k)) and maj@k (exact expectation over all
k-subsets of a problem's n samples that the majority answer is correct; None does not vote, ties are broken
uniformly at random) as in DeepSeekMath's Pass@K vs Maj@K, averaged over problems. Both come from
grpo_ext.evaluation.metrics (pass_at_k, maj_at_k_many), the functions the grpo-ext harness and its lm-eval tasks use.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `str`): for each problem, the normalised answer key of each sample
        (`None` = no answer extracted). Problems may have different numbers of samples.
    references (`list` of `str`): the normalised reference answer of each problem.
    k (`int` or `list` of `int`, optional): the k to report. Default: 1, 2, 4, ... up to the smallest number of
        samples of a problem. Every k must be <= every problem's number of samples.
    correct (`list` of `list` of `bool`, optional): the verifier's verdict for each sample, when correctness is not
        plain equality of answer key and reference (e.g. math-verify equivalence). Default: key == reference.
Returns:
    `pass@k` and `maj@k` for each k: means over problems.
Examples:
    >>> metric = evaluate.load("evals/metrics/passk_majk")
    >>> metric.compute(predictions=[["1", "2"], ["3", "3"]], references=["1", "3"], k=[1, 2])
    {'pass@1': 0.75, 'pass@2': 1.0, 'maj@1': 0.75, 'maj@2': 0.75}
"""

_CITATION = """\
@article{chen2021codex, title={Evaluating Large Language Models Trained on Code}, author={Chen, Mark and others},
  journal={arXiv preprint arXiv:2107.03374}, year={2021}}
@article{shao2024deepseekmath, title={DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
  Models}, author={Shao, Zhihong and others}, journal={arXiv preprint arXiv:2402.03300}, year={2024}}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PasskMajk(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                }
            ),
            reference_urls=["https://arxiv.org/abs/2107.03374", "https://arxiv.org/abs/2402.03300"],
        )

    def _compute(self, predictions, references, k=None, correct=None):
        if not predictions:
            raise ValueError("passk_majk: no problems (predictions is empty)")
        sizes = [len(p) for p in predictions]
        if min(sizes) == 0:
            raise ValueError(f"passk_majk: problem {sizes.index(0)} has no samples")
        ks = [k] if isinstance(k, int) else list(k) if k is not None else None
        if ks is None:  # the registry's rule: the powers of two up to the smallest n
            ks = default_ks(min(sizes), with_n=False)
        if correct is None:
            correct = [
                [a is not None and a == ref for a in answers]
                for answers, ref in zip(predictions, references, strict=True)
            ]
        else:
            if len(correct) != len(predictions):
                raise ValueError(f"passk_majk: correct has {len(correct)} problems, predictions {len(predictions)}")
            for p, (flags, answers) in enumerate(zip(correct, predictions, strict=True)):
                if len(flags) != len(answers):
                    raise ValueError(f"passk_majk: problem {p}: {len(flags)} correct flags for {len(answers)} samples")
            correct = [[bool(f) for f in flags] for flags in correct]
        for kk in ks:
            if not 1 <= kk <= min(sizes):
                raise ValueError(f"passk_majk: k={kk} needs 1 <= k <= n for every problem (smallest n: {min(sizes)})")
        counts = [sum(flags) for flags in correct]
        majority = maj_at_k_many(predictions, correct, ks)
        out = {
            PASS_AT_K.at(kk): float(np.mean([pass_at_k(n, c, kk) for n, c in zip(sizes, counts, strict=True)]))
            for kk in ks
        }
        out.update({MAJ_AT_K.at(kk): float(np.mean(majority[:, j])) for j, kk in enumerate(ks)})
        return out

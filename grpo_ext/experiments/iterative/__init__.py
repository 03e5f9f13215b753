"""Iterative RL with GRPO (DeepSeekMath 4.1.4): the reward model is retrained on the current policy's samples.

As the policy moves, a reward model trained on an earlier policy's samples stops supervising it well, and GRPO
exploits its mistakes (reward hacking). The experiment compares three arms over the same budget and seeds
(:mod:`~grpo_ext.experiments.iterative.arms`): ``iterative`` (the RM retrained every iteration on fresh policy samples
plus a ~10% replay), ``frozen`` (the iteration-0 RM throughout) and ``verifier`` (the rule-based upper bound). For each
seed:

0. sample the base policy on the RL prompt pool, label the samples with the task's verifier (for a process RM, its
   step verifier: the ground truth the RM is meant to approximate) and train RM_0; score the base policy;
1. for each iteration k = 1..N and each arm: GRPO from policy_{k-1}, which is also the reference (the reset),
   against the arm's reward; the RM's and the verifier's rewards logged side by side; fresh samples of policy_k
   measure the RM it was trained against; the iterative arm then trains RM_{k-1} on new samples + replay -> RM_k
   and measures it again; policy_k's pass@1 / maj@k on the test problems.

One job per module:

- ``args``: :class:`IterativeArguments` (the experiment's settings; GRPO's are ``GRPOExtConfig``'s);
- ``arms``: the arms and what rewards each;
- ``labels``: the verifier's labels on policy samples;
- ``replay``: the seeded replay sampler (new data + ~10% history);
- ``rm_training``: the reward model's lifecycle (init from the policy or from scratch, encode, train, evaluate);
- ``measure``: a seed's prompts and draws: RM data, fresh measurement samples, the policy's test scores;
- ``policy``: the GRPO trainer of an iteration (built by ``grpo_ext.assembly``), the logged rewards, the reset check;
- ``guard``: the collapse guard (stop an iteration when the verifier reward falls);
- ``state``: the state files, written atomically after each iteration, so a killed run resumes;
- ``start``: a seed's iteration 0, shared by its arms; ``loop``: :class:`ArmRun`, one arm's iterations;
- ``experiment``: every arm of every seed, ``workers`` at a time; ``summary``: the numbers, intervals and targets;
- ``report`` (one run) and ``arms_report`` (the experiment): markdown, JSON and plot.

The reward models, as reward *sources* the policy trains against, are :mod:`grpo_ext.rewards.orm` and
:mod:`grpo_ext.rewards.prm`.
"""

from grpo_ext.experiments.iterative.args import IterativeArguments
from grpo_ext.experiments.iterative.arms import ARMS
from grpo_ext.experiments.iterative.experiment import Experiment, run_experiment
from grpo_ext.experiments.iterative.guard import CollapseGuard, first_collapse
from grpo_ext.experiments.iterative.labels import check_verifier, label_samples
from grpo_ext.experiments.iterative.loop import ArmRun
from grpo_ext.experiments.iterative.policy import build_policy_trainer
from grpo_ext.experiments.iterative.report import render_report, write_report
from grpo_ext.experiments.iterative.state import LOOP_STATE_FILE, load_state

__all__ = [
    "ARMS",
    "LOOP_STATE_FILE",
    "ArmRun",
    "CollapseGuard",
    "Experiment",
    "IterativeArguments",
    "build_policy_trainer",
    "check_verifier",
    "first_collapse",
    "label_samples",
    "load_state",
    "render_report",
    "run_experiment",
    "write_report",
]

"""Iterative RL with GRPO (DeepSeekMath 4.1.4): the reward model is retrained on the current policy's samples.

As the policy improves, a fixed reward model stops supervising it well. The loop:

0. sample the base policy on train prompts, label the samples with the task's verifier (the ground truth the RM
   is meant to approximate) and train the initial RM, initialised from the policy's weights;
1. for each iteration k = 1..N:
   a. train the policy for ``max_steps`` GRPO steps against RM_{k-1}, starting from policy_{k-1}, which is also
      the reference model: starting the trainer from policy_{k-1}'s folder is the reference reset (TRL rebuilds
      its reference from ``model.config._name_or_path``);
   b. sample policy_k on train prompts and label the samples with the verifier;
   c. RM training set = the new samples + a replay of ``replay_ratio`` x (new set size) historical records;
   d. continue training RM_{k-1} on it -> RM_k;
   e. report RM accuracy/AUC on held-out fresh samples of policy_k (test prompts) before and after the update,
      the policy's pass@1 / maj@k (evaluation harness) and the replay actually used.

One job per module:

- ``args``: :class:`IterativeArguments` (the loop's settings; GRPO's are ``GRPOExtConfig``'s);
- ``labels``: the verifier's labels on policy samples;
- ``replay``: the seeded replay sampler (new data + ~10% history);
- ``rm_training``: the reward model's lifecycle (init from the policy, encode, train, evaluate);
- ``policy``: the GRPO trainer of an iteration (built by ``grpo_ext.assembly``), the reference-reset check;
- ``state``: ``iterative_state.json``, written atomically after each iteration, so a killed run resumes;
- ``loop``: :class:`IterativeLoop`, one body for every iteration;
- ``report``: markdown, JSON and plot.

The reward models, as reward *sources* the policy trains against, are :mod:`grpo_ext.rewards.orm` and
:mod:`grpo_ext.rewards.prm`.
"""

from grpo_ext.iterative.args import IterativeArguments
from grpo_ext.iterative.labels import check_verifier, label_samples
from grpo_ext.iterative.loop import IterativeLoop, run_iterative
from grpo_ext.iterative.policy import build_policy_trainer
from grpo_ext.iterative.report import render_report, write_report
from grpo_ext.iterative.state import LOOP_STATE_FILE, load_state

__all__ = [
    "LOOP_STATE_FILE",
    "IterativeArguments",
    "IterativeLoop",
    "build_policy_trainer",
    "check_verifier",
    "label_samples",
    "load_state",
    "render_report",
    "run_iterative",
    "write_report",
]

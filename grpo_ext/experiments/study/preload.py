"""What every study job needs, imported once in the forkserver its workers are forked from (``run_jobs``).

A job is a fresh process (no state carried from one run to the next), so without this every one of a study's
dozens of runs would import TRL's trainers (GRPO's pulls vLLM's client, requests and urllib3: seconds of regular
expressions compiled at import), PEFT and the Llama modelling code, and build transformers' checkpoint conversion
table (every architecture's, at the first ``from_pretrained``) again: most of a ``--quick`` job's time. Imported here,
they are inherited by every fork. Importing this module has no other effect; a module that fails to import is left
to the job (which then fails with its own error).

Last, :func:`gc.freeze`: the objects imported so far go to the collector's permanent generation, so the workers'
collections (TRL and accelerate call ``gc.collect()`` at every training start) do not walk them again, and their
pages stay shared with the forkserver.
"""

from __future__ import annotations

import contextlib
import gc
import importlib

#: Modules a study job imports: the runners and the harness, each runner's TRL trainer, PEFT, the Llama family.
MODULES = (
    "grpo_ext.methods.runners",
    "grpo_ext.evaluation.harness",
    "grpo_ext.evaluation.backends",
    "grpo_ext.assembly",
    "grpo_ext.trainer",
    "trl.trainer.sft_trainer",
    "trl.trainer.dpo_trainer",
    "peft",
    "transformers.models.llama.modeling_llama",
)


def _warm() -> None:
    for name in MODULES:
        with contextlib.suppress(ImportError):  # the job that needs it raises its own error
            importlib.import_module(name)
    with contextlib.suppress(ImportError):  # built for every architecture at the first from_pretrained, then copied
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("llama")


_warm()
gc.freeze()

"""How ``scripts/run_methods.py`` runs a study's jobs, as one frozen, picklable object: the runs (:mod:`.runs`, in
worker processes), stage 0 (:mod:`.signal.stage_zero`) and the report (:mod:`.report`) read it."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["StudyOptions"]


@dataclass(frozen=True)
class StudyOptions:
    base: str  # the model every run starts from (the study's base, --model's, or --quick's rehearsal model)
    configs: str  # the folder of the arms' method configs (`Study.configs_dir`)
    quick: bool = False  # --quick: every run and evaluation on a tiny budget
    progress: bool = True  # progress bars in the runs and evaluations
    quick_flags: str = ""  # --quick's flags for every run (a command-line string)
    quick_method_flags: dict[str, str] = field(default_factory=dict)  # --quick's further flags, by method runner
    # With a study `start` (:mod:`.start`): `base` is the start's merged model; the records name it by its hash (its
    # folder differs between clones), the raw base is kept for the `raw_base` baselines, and every run skips the
    # train prompts the start was trained on.
    base_identity: str | None = None
    raw_base: str | None = None
    train_offset: int = 0

"""The renderers of the docs' rendered blocks (`make docs`, scripts/render_docs.py), one module per family of results:
the embedded default (`embedded`), the fair stage (`compare`), the main job's search (`main_job`), iterative RL
(`iterative`), the real-model studies (`real_study`, `sft_study`) and the benchmarks (`performance`); `formats` writes
their numbers and `registry` holds what each block is rendered by and from.

Importing this package registers every renderer in `registry.RENDERERS`. To add a block: a function registered with
``@renderer("name", "path/to/record.json", ...)`` in its family's module (a new family: a new module, imported below).
"""

from scripts.doc_blocks import (  # noqa: F401 (registers)
    compare,
    embedded,
    iterative,
    main_job,
    performance,
    real_study,
    sft_study,
)
from scripts.doc_blocks.registry import RENDERERS, load_source, renderer

__all__ = ["RENDERERS", "load_source", "renderer"]

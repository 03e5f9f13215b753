"""Kept only while grpo_ext/modeling.py (being edited on another branch) still imports ``grpo_ext.models``.

Model-name resolution lives in :mod:`grpo_ext.model_paths`; delete this file once modeling.py imports from there.
"""

from grpo_ext.model_paths import EMBEDDED_MODEL_DIR, EMBEDDED_NAME, known_model_name, resolve_model_path

__all__ = ["EMBEDDED_MODEL_DIR", "EMBEDDED_NAME", "known_model_name", "resolve_model_path"]

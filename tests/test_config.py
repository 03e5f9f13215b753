"""GRPOExtConfig documents every field it adds, in TRL's docstring layout, and keeps each field's help."""

from __future__ import annotations

import dataclasses
import re

from trl import GRPOConfig

from grpo_ext.config import GRPOExtConfig


def _own_fields():
    inherited = {f.name for f in dataclasses.fields(GRPOConfig)}
    return [f for f in dataclasses.fields(GRPOExtConfig) if f.name not in inherited]


def test_every_field_is_documented_in_the_class_docstring_and_has_help():
    doc = GRPOExtConfig.__doc__
    assert "Parameters:" in doc and doc.count("> Parameters that control") >= 3
    documented = re.findall(r"^ {8}(\w+) \(`", doc, flags=re.MULTILINE)
    own = [f.name for f in _own_fields()]
    assert own and documented == own  # every field, once, in declaration order
    for f in _own_fields():
        assert f.metadata.get("help"), f.name

"""The one report layer (grpo_ext.report_format): how every report writes a number, an interval and a table."""

import pytest

from grpo_ext.report_format import (
    arrow,
    cell,
    ci,
    count_spread,
    fmt,
    md_header,
    md_row,
    signed,
    signed_with_seeds,
    spread,
    with_ci,
)


def test_numbers_and_intervals():
    assert fmt(None) == "–" and fmt(0.4555) == "0.456" and fmt(1.0 / 3, 2) == "0.33"
    assert cell(None) == "–" and cell(0.5) == "0.500" and cell(3) == "3" and cell("x") == "x"
    assert with_ci(0.5, (0.4, 0.6)) == "0.500 [0.400, 0.600]" and with_ci(0.5, None) == "0.500"
    assert ci({"estimate": 0.1, "low": -0.05, "high": 0.2}, sign=True) == "+0.100 [-0.050, +0.200]"
    assert ci(0.25) == "0.250" and ci(None) == "–"
    assert arrow(0.4, 0.5) == "0.400 → 0.500" and arrow(0.4, None) == "0.400" and arrow(None, None) == "–"


def test_differences():
    d = {"difference": 0.12, "low": 0.08, "high": 0.16, "per_seed": [0.1, 0.14]}
    assert signed(d) == "**+0.120 [+0.080, +0.160]**"
    assert signed({**d, "low": -0.01}) == "+0.120 [-0.010, +0.160]"
    assert signed({"difference": 0.12, "low": None}) == "+0.120" and signed(None) == "–"
    assert signed_with_seeds(d) == "+0.120 [+0.080, +0.160] (seeds: +0.100, +0.140)"
    wider = signed_with_seeds({**d, "over_seeds": [0.01, 0.2]})
    assert wider == "+0.120 [+0.080, +0.160] (seeds: +0.100, +0.140; over seeds and problems [+0.010, +0.200])"


def test_spreads():
    assert spread({"count": 1, "mean": 0.5}) == "0.500"
    assert spread({"count": 2, "mean": 0.5, "min": 0.4, "max": 0.6}) == "0.500 (0.400–0.600)"
    assert count_spread({"mean": 1024.0, "min": 1024, "max": 1024}) == "1,024"
    assert count_spread({"mean": 1024.0, "min": 960, "max": 1088}) == "1,024 (960–1,088)"
    assert spread(None) == count_spread(None) == "–"


def test_tables():
    assert md_header(["arm", "pass@1"], "lr") == ["| arm | pass@1 |", "|---|---:|"]
    assert md_row(["grpo", 3, ""]) == "| grpo | 3 |  |"
    with pytest.raises(ValueError, match="2 columns but 1"):
        md_header(["a", "b"], "l")

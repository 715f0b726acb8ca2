"""Measurements as plug-ins (issue 52): a measurement a user registers in a file of their own is computed by compare
for every variant, output and step, equals the built-in figure it re-implements, shows in every format, and a new
process reads it back from the store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import inspector
from inspector._targets.load import import_file

USERS = Path(__file__).parent / "data" / "max_err_metric.py"


def test_the_built_ins_are_registered_like_a_users():
    names = [m.name for m in inspector.metrics()]
    assert names[:5] == ["sqnr", "max-abs", "mean-abs", "mse", "flushed"]
    assert {m.name for m in inspector.metrics("cost")} >= {"cycles", "npu-ops", "sram", "flash"}
    sqnr = inspector.metrics.get("sqnr")
    assert (sqnr.unit, sqnr.better, sqnr.key) == ("dB", "higher", "sqnr_db")
    assert "higher is better" in inspector.metrics.describe("sqnr")


@pytest.mark.parametrize("name, message", [("two words", "one word"), ("sqnr", "registered already")])
def test_a_bad_measurement_is_one_line(name, message):
    with pytest.raises(inspector.InspectorError, match=message) as info:
        inspector.metric(name)(lambda reference, quantized: 0.0)
    assert "\n" not in str(info.value)
    with pytest.raises(inspector.InspectorError, match="unknown measurement 'nope'"):
        inspector.compare("sample:conv_mul_scalar", variants=("off",), engine="simulation", metrics=("nope",))


@pytest.mark.requires_tosa
def test_a_users_measurement_is_computed_shown_everywhere_and_read_back_by_a_new_process():
    import_file(USERS)  # registers max-err
    try:
        c = inspector.compare("sample:stateful_conv_mul", variants=("off", "upstream"), steps=3, metrics=("max-err",))
        for r in c.results:
            assert len(r.metrics) == 3
            for m in r.metrics:  # every variant, output and step; the same figure as the built-in it writes again
                assert m.value("max-err") == m.value("max-abs") == r.value("max-err", m.output, m.step)
        frame = c.to_dataframe()
        assert (frame["max-err"] == frame["max_abs_error"]).all()
        data = json.loads(json.dumps(c.to_dict()))
        assert all("max-err" in m for v in data["variants"] for m in v["metrics"])
        read_back = inspector.Comparison.from_dict(data)
        assert read_back.results[1].metrics[2].value("max-err") == c.results[1].metrics[2].value("max-err")
        assert "max-err" in c.to_markdown() and "max-err" in c._repr_mimebundle_()["text/html"]
        report = inspector.analyze("sample:stateful_conv_mul").report(c, format="md")
        assert "max-err" in report
        figure = c.plot("drift", metric="max-err")
        assert figure.axes[0].get_ylabel().startswith("max-err") and figure._repr_png_()[:4] == b"\x89PNG"
        plotted = figure.axes[0].lines[0].get_ydata()
        assert list(plotted) == [m.value("max-err") for m in c.results[0].metrics]
        code = ("import json, sys, inspector; from inspector._targets.load import import_file; import_file(sys.argv[1]); "
                "c = inspector.compare('sample:stateful_conv_mul', variants=('off', 'upstream'), steps=3, metrics=('max-err',), "
                "workers=1); print(json.dumps([[r.cached, [m.value('max-err') for m in r.metrics]] for r in c.results]))")
        out = subprocess.run([sys.executable, "-c", code, str(USERS)], capture_output=True, text=True, timeout=600,
                             check=True)
        back = json.loads(out.stdout.strip().splitlines()[-1])
        assert [cached for cached, _ in back] == [True, True]  # answered by the store, computed from its outputs
        assert [values for _, values in back] == [[m.value("max-err") for m in r.metrics] for r in c.results]
    finally:
        inspector.metrics.unregister("max-err")

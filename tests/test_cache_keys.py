"""An answer always belongs to the model in front of the user: no cache is keyed by less than
what determines the result (notebook cells re-run with changed arguments, edited weights,
redefined classes), and the same model twice is still answered from the cache."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

import inspector
from inspector._targets import load as _load
from inspector import clear_cache

X = (torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)),)


class M(nn.Module):
    """The model of the issue: the scale and a second user come from constructor arguments."""

    def __init__(self, s, users=False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.s = s
        self.users = users

    def forward(self, x):
        y = self.conv(x)
        return y * self.s + y if self.users else y * self.s


def verdict(model, **kw):
    site = inspector.analyze(model, example_inputs=X, stage="aten", **kw).sites[0]
    return site.decision, site.reason_codes, site.scale.short()


def test_constructor_arguments_change_the_answer():
    assert verdict(M(0.5)) == ("fold", (), "scalar 0.5")
    assert verdict(M(0.5, users=True)) == ("skip", ("conv-has-other-users",), "scalar 0.5")
    assert verdict(M(3.0)) == ("fold", (), "scalar 3")
    assert verdict(M(0.5)) == ("fold", (), "scalar 0.5")


def test_an_attribute_set_after_construction_changes_the_answer():
    m = M(0.5)
    assert verdict(m) == ("fold", (), "scalar 0.5")
    m.s = 2.0
    assert verdict(m) == ("fold", (), "scalar 2")
    m.users = True
    assert verdict(m)[1] == ("conv-has-other-users",)


class ChannelScale(nn.Module):
    def __init__(self, persistent=True):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.register_buffer("scale", torch.full((1, 4, 1, 1), 0.5), persistent=persistent)

    def forward(self, x):
        return self.conv(x) * self.scale


@pytest.mark.parametrize("persistent", [True, False], ids=["buffer", "non-persistent-buffer"])
def test_an_in_place_edit_of_a_buffer_changes_the_answer(persistent):
    m = ChannelScale(persistent)
    first = inspector.analyze(m, example_inputs=X, stage="aten").sites[0].scale
    m.scale.mul_(40)
    m.scale[0, 0] = 1e-3
    second = inspector.analyze(m, example_inputs=X, stage="aten").sites[0].scale
    assert (first.min_abs, first.max_abs) == (0.5, 0.5)
    assert second.min_abs == pytest.approx(1e-3) and second.max_abs == 20.0
    risks = inspector.analyze(m, example_inputs=X, stage="aten").sites[0].risk_codes
    assert "wide-dynamic-range-scale" in risks


def test_an_in_place_weight_edit_gives_a_new_target():
    m = M(0.5)
    first = _load.load(m, X)
    with torch.no_grad():
        m.conv.weight.mul_(2)
    second = _load.load(m, X)
    assert first is not second and first.key != second.key
    assert not torch.equal(first.exported.state_dict["conv.weight"], second.exported.state_dict["conv.weight"])


def test_a_class_redefined_under_the_same_name_is_a_new_model():
    source = textwrap.dedent('''
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.conv = nn.Conv2d(3, 4, 3, padding=1)
            def forward(self, x):
                {body}
    ''')
    first, second = {}, {}
    exec(compile(source.format(body="return self.conv(x) * 0.5"), "cell_1.py", "exec"), first)  # noqa: S102 - the test's own cell
    exec(compile(source.format(body="y = self.conv(x); return y * 0.5 + y"), "cell_1.py", "exec"), second)  # noqa: S102 - the test's own cell
    assert first["Net"].__name__ == second["Net"].__name__ == "Net"
    assert verdict(first["Net"]()) == ("fold", (), "scalar 0.5")
    assert verdict(second["Net"]())[1] == ("conv-has-other-users",)
    assert verdict(first["Net"]())[0] == "fold"


def test_inputs_and_names_are_part_of_the_key():
    m = M(0.5)
    a = _load.load(m, X)
    b = _load.load(m, (X[0] * 2,))
    assert a is not b and a.key != b.key


def test_the_same_model_twice_is_the_same_target_with_its_stage_graphs():
    a = inspector.analyze(M(0.5), example_inputs=X, stage="tfa")
    b = inspector.analyze(M(0.5), example_inputs=X, stage="tfa")  # a fresh object with the same content
    assert a.target is b.target
    assert a.stage_graph is b.stage_graph  # the tfa capture was not built twice


def test_a_rewritten_script_file_is_imported_again(tmp_path):
    path = tmp_path / "net.py"
    template = textwrap.dedent('''
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3, padding=1)
            def forward(self, x):
                return self.conv(x) * {scale}
            def example_inputs(self):
                return (torch.ones(1, 3, 8, 8),)
    ''')
    path.write_text(template.format(scale="0.5"))
    assert inspector.analyze(f"{path}:Net", stage="aten").sites[0].scale.short() == "scalar 0.5"
    path.write_text(template.format(scale="4.0"))
    assert inspector.analyze(f"{path}:Net", stage="aten").sites[0].scale.short() == "scalar 4"


@pytest.mark.requires_tosa
def test_compare_recomputes_after_an_in_place_weight_edit_and_caches_the_same_model():
    clear_cache()
    m = ChannelScale()
    first = inspector.compare(m, variants="upstream", example_inputs=X)
    again = inspector.compare(ChannelScale(), variants="upstream", example_inputs=X)
    assert again.results[0].cached and again.results[0].metrics == first.results[0].metrics
    with torch.no_grad():
        m.conv.weight.mul_(3)
    edited = inspector.compare(m, variants="upstream", example_inputs=X)
    assert not edited.results[0].cached
    assert not torch.equal(edited.results[0].outputs[0][0], first.results[0].outputs[0][0])

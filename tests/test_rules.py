"""Rules you write (issue 18): a guard of a ``RuleContext``, or a whole pass class, loaded from a file.

A guard keeps exactly the sites it skips from the installed pass and changes nothing else; a
copy of the installed pass run as a rule decides as the installed pass; a patched copy skips
where it does not fold (``rule-pass-skipped``); every broken rule is one line naming it, and
leaves the stage graph and the caller's model as they were.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

import inspector
from inspector import InspectorError
from conftest import NO_LOWERING, ROOT, assert_bit_identical, state_of

RULES = ROOT / "sample_models" / "rules.py"
WIDE = f"{RULES}:keep_wide_scales"
OUTPUTS = f"{RULES}:skip_reaching_outputs"
PASS = "FoldScalarMulIntoConvPass"
SAMPLES = inspector.samples.names()


@pytest.fixture(autouse=True)
def _forget_new_rules():
    """Every rule a test registers (a file's NAME, an @inspector.rule) is unregistered after it."""
    before = set(inspector.rules)
    yield
    for name in set(inspector.rules) - before:
        inspector.rules.unregister(name)


@pytest.fixture(scope="module")
def pass_copy(tmp_path_factory):
    """The installed pass's own file, copied at test time (a "fork" that changed nothing)."""
    import executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass as installed

    path = tmp_path_factory.mktemp("pass") / "fold_pass_copy.py"
    shutil.copy(installed.__file__, path)
    return path


def patched(pass_copy, folder, name: str, old: str, new: str):
    """``pass_copy`` with ``old`` replaced by ``new`` (exactly once), written to ``folder/name``."""
    text = pass_copy.read_text()
    assert text.count(old) == 1, f"the installed pass changed: {old!r} is not in it once"
    path = folder / name
    path.write_text(text.replace(old, new))
    return path


def without_risks(site: inspector.Site) -> dict:
    d = site.to_dict()
    d.pop("risks")
    return d


def nodes_of(analysis: inspector.Analysis) -> list[str]:
    return [n.name for n in analysis.stage_graph.graph_module.graph.nodes]


def reaches_output(analysis: inspector.Analysis, mul: str) -> bool:
    """The mul's value reaches the graph's output node (a walk over users, on the pristine graph)."""
    graph = analysis.stage_graph.graph_module.graph
    start = next(n for n in graph.nodes if n.name == mul)
    stack, seen = [start], set()
    while stack:
        node = stack.pop()
        if node.op == "output":
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(node.users)
    return False


def wide(site: inspector.Site) -> bool:
    s = site.scale
    return s.kind not in ("scalar", "scalar-tensor") and s.ratio is not None and s.ratio >= 100


# What each guard of sample_models/rules.py should skip, read independently of it.
GUARDS = {
    "keep_wide_scales": (WIDE, "rule:wide-scale", lambda analysis, site: wide(site)),
    "skip_reaching_outputs": (OUTPUTS, "rule:reaches-output", lambda analysis, site: reaches_output(analysis, site.mul)),
}


# ---------------------------------------------------------------- guards


@pytest.mark.parametrize("guard", sorted(GUARDS))
@pytest.mark.parametrize("stage", ["tfa", "edge"])
def test_a_guard_changes_exactly_the_sites_it_skips(stage_analyses, guard, stage):
    spec, code, skips = GUARDS[guard]
    skipped_somewhere = 0
    for name in SAMPLES:
        upstream = stage_analyses(name, stage)
        names_before = nodes_of(upstream)
        mine = upstream.with_rule(spec)
        assert mine.rule.name == guard and mine.rule.origin == f"{RULES.resolve()}:{guard}"
        assert mine.rule.check is not None and mine.rule.pass_class is None
        guarded = {s.mul for s in upstream.sites if skips(upstream, s)}
        for up, site in zip(upstream.sites, mine.sites):
            assert (site.id, site.mul) == (up.id, up.mul)
            where = (name, stage, site.id)
            if site.mul in guarded:
                skipped_somewhere += 1
                assert site.decision == "skip", where
                assert code in site.reason_codes, (where, site.reason_codes)
                reason = site.reasons[site.reason_codes.index(code)]
                assert reason.detail and guard in reason.message, (where, reason)
                if up.folded:  # the guard is why it is skipped: its reason comes first
                    assert site.reason_codes[0] == code, (where, site.reason_codes)
                assert site.mismatch is None, where
            elif site.chained_after in guarded and up.folded:
                # conv(x) * a * b with a kept from the pass: b no longer multiplies the conv (the pass's
                # own reason, not the guard's)
                assert site.decision == "skip" and site.reason_codes == ("follows-unfolded-mul",), where
            else:
                assert code not in site.reason_codes, where
                assert without_risks(site) == without_risks(up), where
        assert nodes_of(upstream) == names_before, (name, stage)
    assert skipped_somewhere, f"{guard} skipped no site of any sample at {stage}: the test proves nothing"


@pytest.mark.parametrize("stage", ["tfa", "edge"])
def test_a_rule_leaves_the_callers_model_untouched(pass_copy, stage):
    model = inspector.samples.get("stateful_wide_scale")
    before = state_of(model)
    for policy in (WIDE, OUTPUTS, f"{pass_copy}:{PASS}"):
        analysis = inspector.analyze(model, stage=stage, rule=policy)
        assert analysis.sites, policy
        analysis.after  # noqa: B018 - the whole after-graph too (the pass writes scaled weights in place at tfa)
        assert_bit_identical(before, model)
    assert inspector.analyze(model, stage=stage, rule=WIDE).sites[0].reason_codes == ("rule:wide-scale",)


def test_a_guard_file_registers_nothing_on_import():
    from inspector._targets.load import import_file

    before = list(inspector.rules)
    module = import_file(RULES)
    assert list(inspector.rules) == before
    assert callable(module.keep_wide_scales) and callable(module.skip_reaching_outputs)
    assert module.keep_wide_scales.__doc__ and module.skip_reaching_outputs.__doc__


# ---------------------------------------------------------------- a pass class from a file


@pytest.mark.parametrize("stage", NO_LOWERING)
def test_a_copy_of_the_installed_pass_decides_like_upstream(stage_analyses, pass_copy, stage):
    spec = f"{pass_copy}:{PASS}"
    for name in SAMPLES:
        upstream = stage_analyses(name, stage)
        names_before = nodes_of(upstream)
        mine = upstream.with_rule(spec)
        assert mine.rule.name == PASS and mine.rule.pass_class is not None and mine.rule.check is None
        assert [s.to_dict() for s in mine.sites] == [s.to_dict() for s in upstream.sites], (name, stage)
        assert nodes_of(upstream) == names_before, (name, stage)


# "_fold_scale_into_conv returns None for every site": the copy folds nothing.
NO_FOLD = ("        weight_node = conv_node.args[1]\n        bias_node = conv_node.args[2]\n",
           "        return None\n        weight_node = conv_node.args[1]\n        bias_node = conv_node.args[2]\n")
# "call skips every second mul it matches": the copy folds some sites and leaves others.
EVERY_SECOND = ("            match = self._match_mul_after_conv(node)\n            if match is None:\n"
                "                continue\n",
                "            match = self._match_mul_after_conv(node)\n            if match is None:\n"
                "                continue\n            matched += 1\n            if matched % 2 == 0:\n"
                "                continue\n")
EVERY_SECOND_COUNTER = ("        modified = False\n", "        modified = False\n        matched = 0\n")


@pytest.mark.parametrize("stage", NO_LOWERING)
@pytest.mark.parametrize("patch", ["no-fold", "every-second"])
def test_a_patched_copy_skips_where_it_does_not_fold(stage_analyses, pass_copy, tmp_path, patch, stage):
    if patch == "no-fold":
        path = patched(pass_copy, tmp_path, "no_fold.py", *NO_FOLD)
    else:
        path = patched(pass_copy, tmp_path, "half.py", *EVERY_SECOND_COUNTER)
        path = patched(path, tmp_path, "every_second.py", *EVERY_SECOND)
    spec = f"{path}:{PASS}"
    seen = {"rule-pass-skipped": 0, "both fold": 0}
    for name in SAMPLES:
        upstream = stage_analyses(name, stage)
        mine = upstream.with_rule(spec)
        assert mine.rule.pass_class is not None
        # conv(x) * a * b with only a folded: a's conv reads a weight scaled once, not twice
        rescaled = {up.conv for up, site in zip(upstream.sites, mine.sites) if up.decision != site.decision}
        for up, site in zip(upstream.sites, mine.sites):
            where = (name, stage, site.id)
            assert site.mismatch is None and "rule-pass-folded" not in site.risk_codes, where
            if up.folded and not site.folded:
                seen["rule-pass-skipped"] += 1
                assert site.reason_codes == ("rule-pass-skipped",), (where, site.reason_codes)
                assert PASS in site.reasons[0].detail, where
            else:
                assert not (site.folded and not up.folded), (where, "the patched copy folds what upstream does not")
                seen["both fold"] += site.folded
                got, want = without_risks(site), without_risks(up)
                if site.conv in rescaled:
                    for key in ("folded_weight", "folded_bias"):
                        got.pop(key), want.pop(key)
                assert got == want, where
        if patch == "no-fold":
            assert not mine.folded, (name, stage)
    assert seen["rule-pass-skipped"], seen
    if patch == "every-second":
        assert seen["both fold"], seen


# ---------------------------------------------------------------- broken rules: one line each

# Pass classes that do what a fold never does, in one file (each is the installed pass, then the mischief).
BAD_PASSES = textwrap.dedent('''
    import torch
    from executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass import FoldScalarMulIntoConvPass as Installed


    class WrongInit(Installed):
        def __init__(self):
            super().__init__()


    class Raises(Installed):
        def call(self, graph_module):
            raise RuntimeError("the pass blew up")


    class ErasesRelu(Installed):
        def call(self, graph_module):
            result = super().call(graph_module)
            graph = graph_module.graph
            relu = next(n for n in graph.nodes if n.op == "call_function" and "relu" in str(n.target))
            relu.replace_all_uses_with(relu.args[0])
            graph.erase_node(relu)
            graph_module.recompile()
            return result


    class AddsNode(Installed):
        def call(self, graph_module):
            result = super().call(graph_module)
            graph = graph_module.graph
            # the user input: the last placeholder (a fold adds its scaled constants before the old ones)
            first = [n for n in graph.nodes if n.op == "placeholder"][-1]
            output = next(n for n in graph.nodes if n.op == "output")
            with graph.inserting_before(output):
                graph.create_node("call_function", torch.ops.aten.neg.default, (first,), name="stray_neg")
            graph_module.recompile()
            return result


    class BreaksLint(Installed):
        def call(self, graph_module):
            result = super().call(graph_module)
            graph = graph_module.graph
            node = next(n for n in graph.nodes if n.op == "call_function" and n.args
                        and getattr(n.args[0], "op", None) == "call_function")
            node.args[0].prepend(node)  # used before it is defined
            return result
''')

BAD_TARGET = "streaming_keyword_spotter"  # four sites and a relu at every stage


def _raising(site):
    raise ValueError("no idea what to do with " + site.site)


def _three(site):
    return 3


def _slow(site):
    import time

    time.sleep(0.2)


BAD_GUARDS = {"guard-raises": (_raising, "raised"), "guard-returns-3": (_three, "returned a int"),
              "guard-too-slow": (_slow, "took")}


@pytest.fixture(scope="module")
def bad_passes(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad") / "bad_passes.py"
    path.write_text(BAD_PASSES)
    return path


def _assert_recovers(analysis: inspector.Analysis, names_before: list[str]) -> None:
    """After a broken rule: the stage graph is as it was and upstream still answers as before."""
    assert nodes_of(analysis) == names_before
    again = analysis.with_rule("upstream")
    assert [s.to_dict() for s in again.sites] == [s.to_dict() for s in analysis.sites]
    assert again.after is not None


@pytest.mark.parametrize("stage", ["tfa", "edge"])
@pytest.mark.parametrize("bad", sorted(BAD_GUARDS))
def test_a_broken_guard_is_one_line_naming_it(stage_analyses, monkeypatch, bad, stage):
    monkeypatch.setattr(inspector._rules.rules, "GUARD_SECONDS", 0.05)
    fn, says = BAD_GUARDS[bad]
    inspector.rule(bad, help="a broken guard")(fn)
    analysis = stage_analyses(BAD_TARGET, stage)
    names_before = nodes_of(analysis)
    with pytest.raises(InspectorError) as info:
        analysis.with_rule(bad)
    message = str(info.value)
    assert "\n" not in message and f"'{bad}'" in message and says in message, message
    assert analysis.sites[0].id in message, message  # the site it failed on
    _assert_recovers(analysis, names_before)
    with pytest.raises(InspectorError) as info:  # and through analyze, as a registered name
        inspector.analyze("sample:" + BAD_TARGET, stage=stage, rule=bad)
    assert "\n" not in str(info.value) and f"'{bad}'" in str(info.value)


def _relu(analysis) -> str:
    return next(n.name for n in analysis.stage_graph.graph_module.graph.nodes
                if n.op == "call_function" and "relu" in str(n.target))


BAD_PASS_SAYS = {
    "WrongInit": lambda a: ["does not take the installed pass's constructor"],
    "Raises": lambda a: ["raised", "the pass blew up"],
    "ErasesRelu": lambda a: [f"removed {_relu(a)}"],
    "AddsNode": lambda a: ["added stray_neg"],
    "BreaksLint": lambda a: ["lint"],
}


@pytest.mark.parametrize("stage", ["tfa", "edge"])
@pytest.mark.parametrize("bad", sorted(BAD_PASS_SAYS))
def test_a_broken_pass_class_is_one_line_naming_it(stage_analyses, bad_passes, bad, stage):
    analysis = stage_analyses(BAD_TARGET, stage)
    names_before = nodes_of(analysis)
    with pytest.raises(InspectorError) as info:
        analysis.with_rule(f"{bad_passes}:{bad}")
    message = str(info.value)
    assert "\n" not in message and f"'{bad}'" in message, message
    for part in BAD_PASS_SAYS[bad](analysis):
        assert part in message, (part, message)
    _assert_recovers(analysis, names_before)


def test_a_guard_of_the_wrong_shape_is_refused_in_one_line():
    with pytest.raises(InspectorError) as info:
        inspector.Skip(code="Not A Slug")
    assert "\n" not in str(info.value)
    with pytest.raises(InspectorError) as info:
        inspector.rules.get(f"{RULES}:no_such_guard")
    assert "\n" not in str(info.value) and "keep_wide_scales" in str(info.value)


# ---------------------------------------------------------------- the CLI


def _cli_json(*argv) -> dict:
    proc = subprocess.run([sys.executable, "-m", "inspector", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_cli_analyze_takes_a_guard_file():
    data = _cli_json("analyze", "sample:stateful_conv_mul", "--stage", "edge", "--policy",
                     "sample_models/rules.py:skip_reaching_outputs", "--json")
    assert data["rule"]["name"] == "skip_reaching_outputs" and data["rule"]["origin"].endswith("rules.py:skip_reaching_outputs")
    (site,) = data["sites"]
    assert site["decision"] == "skip" and site["reasons"][0]["code"] == "rule:reaches-output"


def test_cli_analyze_takes_a_pass_class_file(stage_analyses, pass_copy):
    data = _cli_json("analyze", "sample:stateful_conv_mul", "--stage", "edge", "--policy", f"{pass_copy}:{PASS}",
                     "--json")
    assert data["rule"]["name"] == PASS and data["rule"]["pass_class"]
    assert data["sites"] == [s.to_dict() for s in stage_analyses("stateful_conv_mul", "edge").sites]
    assert data["sites"][0]["decision"] == "fold"


# ---------------------------------------------------------------- compare


@pytest.mark.requires_tosa
def test_compare_runs_a_guard_file_and_a_pass_class_file(pass_copy):
    target = "sample:stateful_conv_mul"
    guarded = inspector.compare(target, variants=("upstream", OUTPUTS), workers=2)
    upstream, mine = guarded.results
    assert mine.variant.rule.name == "skip_reaching_outputs"
    assert upstream.folds["tfa"] == 1 and sum(mine.folds.values()) == 0
    assert not any(s.folded_at for s in mine.sites)
    off = inspector.compare(target, variants=("off",), workers=2).result("off")
    assert mine.metrics == off.metrics

    copied = inspector.compare(target, variants=("upstream", f"{pass_copy}:{PASS}"), workers=2)
    upstream_again, copy = copied.results
    assert copy.variant.rule.name == PASS and not copy.cached  # a pass class is never answered by decisions
    assert copy.folds == upstream.folds
    assert [(s.site_id, s.folded_at) for s in copy.sites] == [(s.site_id, s.folded_at) for s in upstream.sites]
    assert copy.metrics == upstream.metrics == upstream_again.metrics

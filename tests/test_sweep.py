"""``inspector.sweep``: many models x rules x stages, as users run it.

The decisions are checked against ``analyze`` (itself checked against the installed pass), the
numbers against ``compare`` in this process; the executors against each other (local with one and
two workers, a real local Ray cluster); a sweep killed halfway and run again against an
uninterrupted one; a worker killed by a signal against the rows it must not lose.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import inspector
from inspector._base.errors import InspectorError
from inspector import ModelSpec, Sweep, models_from, sweep
from inspector._base.store import Store
from inspector._sweep.records import SweepModel, SweepRow, SweepVariant
from inspector._sweep.sweep import read_models_toml

ROOT = Path(__file__).resolve().parent.parent
RULES = ("upstream", "state-aware", "state-aware-strict")
SAMPLES = ("sample:stateful_conv_mul", "sample:functional_recurrent_conv_mul", "sample:conv_mul_chain")
STEPS = 2

MODEL_FILE = '''
import torch
from torch import nn


class Scaled(nn.Module):
    """conv(x) * per-channel scale: folds under every rule."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.register_buffer("scale", torch.tensor([0.5, 1.0, 2.0, 4.0]).reshape(1, 4, 1, 1))

    def forward(self, x):
        return self.conv(x) * self.scale


class NoExport(nn.Module):
    """Data-dependent control flow: torch.export refuses it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        if x.sum() > 0:
            return self.conv(x) * 2.0
        return self.conv(x)
'''


def _comparable(data):
    """A sweep's JSON without what depends on the clock or on how it ran."""
    if isinstance(data, dict):
        return {k: _comparable(v) for k, v in data.items() if k not in ("run", "timings", "seconds", "cached")}
    if isinstance(data, list):
        return [_comparable(v) for v in data]
    return data


def _entries(out: Path, kind: str) -> list[Path]:
    """The files of the sweep's entries of ``kind`` (``row``, ``variant``, ``model``) in the store at ``out``."""
    return sorted((out / "entries").glob(f"sweep-{kind}-*.entry"))


def _record(out: Path, entry: Path) -> dict | None:
    """What the store at ``out`` reads back from ``entry`` (None: nothing it trusts)."""
    found = Store(out).get(entry.name.removesuffix(".entry"))
    return None if found is None else found.data


def _cli(*args, cwd=None, **kwargs):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "inspector", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=900, **kwargs)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    (folder / "nets.py").write_text(MODEL_FILE)
    (folder / "sub").mkdir()
    (folder / "sub" / "models.toml").write_text(textwrap.dedent('''
        [[model]]
        target = "sample:stateful_conv_mul"

        [[model]]
        target = "../nets.py:Scaled"
        input_shape = [1, 3, 8, 8]
        name = "scaled"
    '''))
    return folder


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The sweep every other one is checked against: two local workers, results kept in a store in out/."""
    out = tmp_path_factory.mktemp("out")
    bars = []
    result = sweep(SAMPLES, rules=RULES, stages=("tfa", "edge"), steps=STEPS, workers=2, out=out, progress=bars.append)
    return result, out, bars


# ---------------------------------------------------------------- models


def test_toml_paths_are_relative_to_the_file(model_dir):
    specs = read_models_toml(model_dir / "sub" / "models.toml")
    assert [s.label for s in specs] == ["sample:stateful_conv_mul", "scaled"]
    assert specs[1].target == f"{(model_dir / 'nets.py').resolve()}:Scaled"
    assert specs[1].input_shapes == ((1, 3, 8, 8),)
    # The same file from anywhere on disk: what it names does not depend on the working folder.
    here = os.getcwd()
    try:
        os.chdir(model_dir.parent)
        again = models_from([str(model_dir / "sub" / "models.toml")])
    finally:
        os.chdir(here)
    assert [s.target for s in again] == [s.target for s in specs]


@pytest.mark.parametrize("text, message", [
    ("[[model]]\ntarget = 'sample:x'\ninput_shape = [1, 0]\n", "input_shape must be lists of positive integers"),
    ("[[model]]\ntarget = 'sample:x'\nshape = [1]\n", "unknown key 'shape'"),
    ("[[model]]\ntarget = 3\n", "target must be a string"),
    ("[model\n", "is not valid TOML"),
    ("title = 'no models'\n", "lists no models"),
    ("[[model]]\ntarget = 'sample:x'\nsteps = -1\n", "steps"),
    ("[[model]]\ntarget = 'sample:x'\nsteps = false\n", "steps must be a whole number"),
    ("[[model]]\ntarget = 'sample:x'\nsteps = 0.0\n", "steps must be a whole number"),
    ("[[model]]\ntarget = 'net.onnx'\n", "cannot tell what 'net.onnx' is"),
])
def test_bad_toml_is_one_line(tmp_path, text, message):
    path = tmp_path / "models.toml"
    path.write_text(text)
    with pytest.raises(InspectorError) as caught:
        read_models_toml(path)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_model_that_fails_is_one_row_and_the_sweep_goes_on(model_dir):
    no_export = ModelSpec(target=f"{model_dir / 'nets.py'}:NoExport", label="no-export", input_shapes=((1, 3, 8, 8),))
    result = sweep(["sample:no_such_sample", no_export, "sample:conv_mul_scalar"], rules=("upstream", "state-aware"),
                   workers=2)
    errors = {m.target: m.error for m in result.models}
    assert "unknown sample 'no_such_sample'" in errors["sample:no_such_sample"]
    assert "torch.export failed for NoExport" in errors["no-export"]
    assert all("\n" not in e for e in errors.values() if e)
    assert errors["sample:conv_mul_scalar"] is None
    assert {(r.target, r.rule) for r in result.rows} == {
        ("sample:conv_mul_scalar", "upstream"), ("sample:conv_mul_scalar", "state-aware")}
    assert "2 models could not be analysed" in " ".join(result.summary())


# ---------------------------------------------------------------- what it finds


def test_rows_are_what_analyze_decides(reference):
    result, _, _ = reference
    assert len(result.rows) == len(SAMPLES) * 2 * len(RULES)
    for row in result.rows:
        analysis = inspector.analyze(row.target, stage=row.stage, rule=row.rule)
        assert row.error is None
        assert row.folded == tuple(s.id for s in analysis.sites if s.folded)
        assert row.skipped == tuple(s.id for s in analysis.sites if not s.folded)
        assert row.reasons == {s.id: tuple(s.reason_codes) for s in analysis.sites if not s.folded}


def test_changed_sites_are_the_sites_the_rules_decide_differently(reference):
    result, _, _ = reference
    expected = set()
    for target in SAMPLES:
        for stage in ("tfa", "edge"):
            decided = {p: {s.id: s.decision for s in inspector.analyze(target, stage=stage, rule=p).sites}
                       for p in RULES}
            for site in decided["upstream"]:
                if len({decided[p][site] for p in RULES}) > 1:
                    expected.add((target, stage, site, tuple(decided[p][site] for p in RULES)))
    found = {(c.target, c.stage, c.site, tuple(c.decisions[p] for p in RULES)) for c in result.changed}
    assert found == expected
    assert found, "the stateful samples must give changed sites (state-aware-strict skips their state writes)"
    # state-aware (PR #21234) sees no signature at tfa: at tfa only the strict rule changes anything.
    assert all(c.decisions["state-aware"] == c.decisions["upstream"] for c in result.changed if c.stage == "tfa")


@pytest.mark.requires_tosa
def test_numbers_are_what_compare_measures(reference):
    result, _, _ = reference
    assert len(result.variants) == len(SAMPLES) * len(RULES)
    for target in SAMPLES:
        comparison = inspector.compare(target, variants=RULES, steps=STEPS, workers=1)
        for r in comparison.results:
            row = next(v for v in result.variants if v.target == target and v.rule == r.variant.rule.name)
            assert row.error is None
            last = [m.sqnr_db for m in r.metrics if m.step == STEPS - 1]
            assert row.sqnr_db_last == min(last)
            assert row.sqnr_db_worst == min(m.sqnr_db for m in r.metrics)
            assert row.max_abs_error == max(m.max_abs_error for m in r.metrics)
    # Variants leading to the same fold decisions ran once (and say whose result they share).
    shared = [v for v in result.variants if v.shared_with]
    assert shared and all(v.sqnr_db_last == next(
        w.sqnr_db_last for w in result.variants if w.target == v.target and w.variant == v.shared_with)
        for v in shared)


def test_progress_has_a_bar_per_phase_that_ends_full(reference):
    _, _, bars = reference
    assert bars
    last = {b.phase: b for b in bars[-1]}
    assert set(last) == {"models analysed", "variants compared"}
    assert all(b.done == b.total and b.fraction == 1.0 for b in last.values())
    assert any(b.eta is not None for step in bars for b in step)


def test_rules_users_write(tmp_path):
    rules_file = ROOT / "sample_models" / "rules.py"
    from_file = f"{rules_file}:skip_reaching_outputs"
    try:
        result = sweep(["sample:conv_mul_scalar", "sample:conv_mul_chain"], rules=("upstream", from_file), workers=2)
        rows = [(r, inspector.analyze(r.target, stage="tfa", rule=r.rule)) for r in result.rows]
    finally:
        inspector.rules.unregister("skip_reaching_outputs")  # a rule loaded here stays for other tests otherwise
    assert result.executor == "local" and not result.notes  # a rule in a file runs in the workers
    for row, analysis in rows:
        assert row.folded == tuple(s.id for s in analysis.sites if s.folded)
    assert {c.target for c in result.changed} == {"sample:conv_mul_scalar", "sample:conv_mul_chain"}

    @inspector.rule("test-sweep-never", help="skips every site")
    def never(ctx):
        return inspector.Skip(code="test-never", detail="never folds")

    try:
        here = sweep(["sample:conv_mul_scalar"], rules=("upstream", "test-sweep-never"), workers=2)
    finally:
        inspector.rules.unregister("test-sweep-never")
    assert here.executor == "inline" and "lives in this process only" in here.notes[0]
    assert [len(r.folded) for r in here.rows] == [1, 0]


# ---------------------------------------------------------------- resumable, and the executors agree


def test_a_second_run_reads_everything_back(reference):
    result, out, _ = reference
    again = sweep(SAMPLES, rules=RULES, stages=("tfa", "edge"), steps=STEPS, workers=2, out=out)
    assert again.reused == len(SAMPLES) * (2 * len(RULES) + len(RULES))
    assert _comparable(again.to_dict()) == _comparable(result.to_dict())
    assert again.seconds < 0.2 * result.seconds


def test_a_record_in_out_that_does_not_read_is_computed_again(tmp_path):
    """out/ is a result store: its entries are read through the store (signed, whole) and then the
    records' from_dict. A row or a variant that does not read as one (a foreign field, a missing number,
    yet signed with the store's secret), or an entry whose bytes changed, is computed again, never
    trusted, and the table is the same."""
    asked = dict(models=["sample:conv_mul_scalar"], rules=("upstream", "off"), steps=1, engine="simulation",
                 workers=1, out=tmp_path)
    first = sweep(**asked)
    assert not list(tmp_path.rglob("*.json")), "no plain JSON files: every record is a store entry"
    assert list((tmp_path / "entries").glob("variant-*.entry")), "the variants' compare results are kept in out/ too"
    (row, *_), (variant, other, *_) = _entries(tmp_path, "row"), _entries(tmp_path, "variant")
    store = Store(tmp_path)
    data = _record(tmp_path, row)
    data["row"]["sites"] = "one"
    store.put(row.name.removesuffix(".entry"), data)
    data = _record(tmp_path, variant)
    del data["variant"]["outputs"]
    store.put(variant.name.removesuffix(".entry"), data)
    raw = bytearray(other.read_bytes())
    raw[-2] ^= 1  # one bit of its payload: the signature no longer holds
    other.write_bytes(bytes(raw))
    assert _record(tmp_path, other) is None
    again = sweep(**asked)
    assert again.reused == len(first.rows) + len(first.variants) - 3
    assert _comparable(again.to_dict()) == _comparable(first.to_dict())
    # and all three were written again, readable
    assert isinstance(_record(tmp_path, row)["row"]["sites"], int)
    assert "outputs" in _record(tmp_path, variant)["variant"] and "outputs" in _record(tmp_path, other)["variant"]


@pytest.mark.own_store  # it starts from an empty store
def test_without_out_the_store_in_use_keeps_the_sweep(tmp_path, monkeypatch):
    """No ``out=``: the sweep's records are entries of the store in use (FOLD_INSPECTOR_STORE), so the
    same sweep run again reads them back; with the store off, nothing is kept or read."""
    from inspector._base import store as _store

    asked = dict(models=["sample:conv_mul_scalar"], rules=("upstream", "state-aware-strict"), workers=1)
    first = sweep(**asked)
    assert first.reused == 0 and first.out is None
    in_use = Store(_store.location())
    assert len(_entries(in_use.root, "row")) == len(first.rows) and len(_entries(in_use.root, "model")) == 1
    again = sweep(**asked)
    assert again.reused == len(first.rows) and _comparable(again.to_dict()) == _comparable(first.to_dict())
    monkeypatch.setenv(_store.ENV, "off")
    assert sweep(**asked).reused == 0


@pytest.mark.own_store  # its point is that the work is done again
@pytest.mark.requires_tosa
def test_one_worker_gives_the_same_table(reference):
    result, _, _ = reference
    one = sweep(SAMPLES, rules=RULES, stages=("tfa", "edge"), steps=STEPS, workers=1)
    # A warm worker answers what it computed in the reference sweep, and says so.
    cached = sum(v.cached for v in one.variants)
    assert any(f"{cached} variant" in n and "answered by warm worker processes" in n for n in one.notes) == bool(cached)
    assert _comparable(one.to_dict()) == _comparable(result.to_dict())
    inspector.clear_cache(disk=True)  # stops the warm workers, empties the store: all computed again, by one worker
    fresh = sweep(SAMPLES, rules=RULES, stages=("tfa", "edge"), steps=STEPS, workers=1)
    assert not any(v.cached for v in fresh.variants) and all(v.timings or v.shared_with for v in fresh.variants)
    assert _comparable(fresh.to_dict()) == _comparable(result.to_dict())


@pytest.mark.requires_ray
@pytest.mark.requires_tosa
def test_ray_gives_the_same_table_bit_for_bit(reference, tmp_path):
    result, _, _ = reference
    on_ray = sweep(SAMPLES, rules=RULES, stages=("tfa", "edge"), steps=STEPS, workers=2, executor="ray", out=tmp_path)
    assert on_ray.executor == "ray"
    assert _comparable(on_ray.to_dict()) == _comparable(result.to_dict())
    # Ray's workers kept their compare results in out/ too: each task names the store, not their environment.
    assert len(_entries(tmp_path, "variant")) == len(on_ray.variants)
    compared = list((tmp_path / "entries").glob("variant-*.entry"))
    assert 0 < len(compared) <= sum(v.shared_with is None for v in on_ray.variants)


def _run_until(args, out: Path, kind: str) -> subprocess.Popen:
    """Start the CLI and return once the store in ``out`` has a sweep entry of ``kind``."""
    # As from a terminal: Ctrl-C reaches it even when this test runs under a parent that ignores SIGINT
    # (Python keeps an inherited SIG_IGN, so the sweep would never see the signal).
    process = subprocess.Popen([sys.executable, "-m", "inspector", *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not _entries(out, kind):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    return process


@pytest.mark.requires_tosa
def test_interrupted_then_killed_then_resumed_gives_the_uninterrupted_table(tmp_path):
    models, rules = SAMPLES[:2], (RULES[0], RULES[2])
    uninterrupted = sweep(models, rules=rules, stages=("tfa",), steps=STEPS, workers=2)
    out = tmp_path / "out"
    args = ["sweep", *models, "--rules", ",".join(rules), "--stages", "tfa", "--steps", str(STEPS),
            "--workers", "2", "--out", str(out), "--format", "json"]
    # Ctrl-C (the terminal sends it to the whole process group): a clean stop, what is done kept.
    process = _run_until(args, out, "row")
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert f"interrupted: the results finished so far are kept in {out}" in stderr
    assert "Traceback" not in stderr and stdout == ""
    rows = _entries(out, "row")
    assert rows and all(_record(out, p)["row"]["error"] is None for p in rows)
    # Killed outright, the workers with it, while variants run.
    process = _run_until(args, out, "variant")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    kept = _entries(out, "variant")
    assert kept and len(kept) < len(models) * len(rules)
    assert all(_record(out, p) is not None for p in kept)
    assert not list(out.rglob("*.tmp")), "a result is written whole or not at all"
    # Started again: it finishes what is missing, and the table is the uninterrupted sweep's.
    resumed = _cli(*args)
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)  # exactly one document on stdout: nothing the backend printed got in
    assert data["run"]["reused"] >= len(rows) + len(kept)
    # The contract scripts rely on.
    assert {"models", "rows", "changed", "variants"} <= set(data)
    assert [m["target"] for m in data["models"]] == list(models) and all(m["error"] is None for m in data["models"])
    assert all({"target", "stage", "rule", "sites", "folded", "skipped", "error"} <= set(r) for r in data["rows"])
    assert all({"target", "stage", "site", "decisions", "reasons"} <= set(c) for c in data["changed"])
    assert all({"target", "stage", "variant", "sqnr_db_last", "sqnr_db_worst", "error"} <= set(v)
               for v in data["variants"])
    assert len(data["variants"]) == len(models) * len(rules) and all(v["error"] is None for v in data["variants"])
    assert [c["target"] for c in data["changed"]] == ["sample:stateful_conv_mul"]
    assert _comparable(data) == _comparable(json.loads(uninterrupted.to_json()))


# ---------------------------------------------------------------- a worker that dies


CRASHING = '''
import os
import signal

import torch
from torch import nn


class Crashes(nn.Module):
    """Builds fine here; in a worker process it dies with {signal} (as a native crash would)."""

    def __init__(self):
        super().__init__()
        if os.getpid() != {here}:  # any process but the test's: a worker
            os.kill(os.getpid(), signal.{signal})
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x) * 0.5
'''


def test_a_dead_worker_loses_only_its_own_row(tmp_path):
    targets = ["sample:conv_mul_scalar"]
    for sig in ("SIGSEGV", "SIGKILL"):
        (tmp_path / f"{sig}.py").write_text(CRASHING.replace("{signal}", sig).replace("{here}", str(os.getpid())))
        targets.append(f"{tmp_path / sig}.py:Crashes")
    result = sweep(targets, rules=("upstream", "state-aware"), workers=2, out=tmp_path / "out")
    errors = {m.target: m.error for m in result.models}
    assert errors["sample:conv_mul_scalar"] is None
    for sig, crashing in zip(("SIGSEGV", "SIGKILL"), targets[1:]):
        assert f"the worker analysing {crashing} died: it was killed by {sig}" in errors[crashing]
    assert {r.target for r in result.rows} == {"sample:conv_mul_scalar"}
    # A death is not a verdict on the model: the next run tries it again (and the others are read back).
    again = sweep(targets, rules=("upstream", "state-aware"), workers=2, out=tmp_path / "out")
    assert again.reused == 2
    assert "died" in {m.target: m.error for m in again.models}[targets[1]]


KILLS_IN_LOWERING = '''
import inspect
import os
import signal

from inspector import Skip


def dies_in_the_quantized_flow(site):
    """Skips every site; the process running a variant's quantized flow is killed (as an OOM kill would)."""
    flow = os.path.join("_numbers", "flow.py")  # where the quantized flow lives since the folders
    if any(frame.function == "run_variant" and frame.filename.endswith(flow) for frame in inspect.stack()):
        os.kill(os.getpid(), signal.SIGKILL)
    return Skip("never", "this rule never folds")
'''


@pytest.mark.requires_tosa
def test_a_worker_killed_in_a_variant_loses_only_that_variant(tmp_path):
    (tmp_path / "rules.py").write_text(KILLS_IN_LOWERING)
    deadly = f"{tmp_path / 'rules.py'}:dies_in_the_quantized_flow"
    try:
        result = sweep(["sample:conv_mul_scalar"], rules=("upstream", deadly), steps=1, workers=2)
    finally:
        inspector.rules.unregister("dies_in_the_quantized_flow")
    assert [r.error for r in result.rows] == [None, None]  # deciding it is fine
    by_rule = {v.rule: v for v in result.variants}
    assert by_rule["upstream"].error is None and by_rule["upstream"].sqnr_db_last > 20
    assert ("the worker running sample:conv_mul_scalar / dies_in_the_quantized_flow died: it was killed by SIGKILL"
            in by_rule["dies_in_the_quantized_flow"].error)
    # The pool replaced the dead worker: the next sweep runs (in a store of its own: nothing read back).
    after = sweep(["sample:conv_mul_scalar"], rules=("upstream",), steps=1, workers=2, out=tmp_path / "after")
    assert after.reused == 0 and after.variants[0].error is None


# ---------------------------------------------------------------- the CLI contract


def test_the_same_model_twice_is_told_apart(model_dir):
    specs = models_from(["sample:stateful_conv_mul", str(model_dir / "sub" / "models.toml")])
    assert [s.label for s in specs] == ["sample:stateful_conv_mul", "sample:stateful_conv_mul#2", "scaled"]


def test_a_toml_list_from_anywhere_on_disk(model_dir, tmp_path):
    here = os.getcwd()
    try:
        os.chdir(tmp_path)  # nowhere near the TOML file or the model file it names
        result = sweep([str(model_dir / "sub" / "models.toml")], rules=("upstream", "state-aware-strict"), workers=2)
    finally:
        os.chdir(here)
    assert [m.target for m in result.models] == ["sample:stateful_conv_mul", "scaled"]
    scaled = next(r for r in result.rows if r.target == "scaled" and r.rule == "upstream")
    assert scaled.sites == 1 and len(scaled.folded) == 1
    assert [c.target for c in result.changed] == ["sample:stateful_conv_mul"]


def test_cli_formats(tmp_path, capsys):
    from inspector._front.cli import main

    base = ["sweep", "sample:stateful_conv_mul", "sample:conv_mul_scalar", "--rules", "upstream,state-aware-strict",
            "--workers", "1", "--out", str(tmp_path / "out")]
    assert main([*base, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "`state-aware-strict` changes 1 site in 1 of 2 models against `upstream`" in md
    assert "| `sample:stateful_conv_mul` | tfa |" in md
    assert main([*base, "--format", "html"]) == 0  # the same results, read back from out/
    page = capsys.readouterr().out
    assert page.startswith("<!doctype html>") and "feeds-buffer-mutation" in page
    assert main([*base, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "target,stage,rule,sites,folded,skipped,error,sqnr_db_last,sqnr_db_worst,cycles,compiler"
    assert len(lines) == 1 + 2 * 2
    for bad, message in [(["--rules", "nope"], "unknown rule 'nope'"), (["--stages", "tfa,late"], "'late'"),
                         (["--steps", "-1"], "--steps"), (["--executor", "dask"], "invalid choice"),
                         (["--models", str(tmp_path / "none.toml")], "no such file")]:
        assert main(["sweep", "sample:conv_mul_scalar", *bad]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


# ---------------------------------------------------------------- what a stranger's names cannot do


def _crafted() -> Sweep:
    evil = "<img src=x onerror=alert(1)>|`"
    where = {evil: {"module": evil, "location": "", "mul": evil}}
    return Sweep(rules=("upstream", "off"), stages=("tfa",), steps=1,
                 models=(SweepModel(target=evil, error=None, fingerprint="f"),),
                 rows=(SweepRow(target=evil, stage="tfa", rule="upstream", sites=1, folded=(evil,), where=where),
                       SweepRow(target=evil, stage="tfa", rule="off", sites=1, skipped=(evil,),
                                reasons={evil: ("rule-off",)}, where=where)),
                 variants=(SweepVariant(target=evil, variant="upstream", rule="upstream", steps=1, sqnr_db_last=30.0,
                                        sqnr_db_worst=29.0),
                           SweepVariant(target=evil, variant="off", rule="off", steps=1, sqnr_db_last=31.0,
                                        sqnr_db_worst=29.5, error=evil)))


def test_model_strings_are_escaped_in_html_and_markdown():
    sweep_ = _crafted()
    page = sweep_.to_html()
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    md = sweep_.to_markdown()
    table = [line for line in md.splitlines() if line.startswith("| ") and "img" in line]
    assert table and all(line.count(" | ") == table[0].count(" | ") for line in table[:1])
    # Outside code spans nothing is markup: every copy of the name sits in a ``...`` span, its pipe escaped.
    assert md.count("<img") == md.count("`` <img src=x onerror=alert(1)>\\|` ``")


def _row(target, stage, rule, folded, site="conv@net.py:1"):
    return SweepRow(target=target, stage=stage, rule=rule, sites=1, folded=(site,) if folded else (),
                    skipped=() if folded else (site,),
                    reasons={} if folded else {site: ("feeds-buffer-mutation",)})


def _variant(target, rule, sqnr):
    return SweepVariant(target=target, variant=rule, rule=rule, steps=3, sqnr_db_last=sqnr, sqnr_db_worst=sqnr)


def test_the_summary_ties_numbers_to_tfa_decisions_only():
    models = (SweepModel(target="m"), SweepModel(target="n"), SweepModel(target="never"))
    # Only edge decided: nothing ties the changes to the numbers, whatever they are.
    edge_only = Sweep(rules=("upstream", "rule"), stages=("edge",), steps=3, models=models[:1],
                      rows=(_row("m", "edge", "upstream", True), _row("m", "edge", "rule", False)),
                      variants=(_variant("m", "upstream", 38.7), _variant("m", "rule", 36.4)))
    line = edge_only.summary()[0]
    assert "tfa was not decided in this sweep" in line and "by construction" not in line
    # m changes at tfa (worse), n at edge only (compared: equal by construction), "never" at edge, not compared.
    rows = (_row("m", "tfa", "upstream", True), _row("m", "tfa", "rule", False),
            _row("n", "tfa", "upstream", True), _row("n", "tfa", "rule", True),
            _row("n", "edge", "upstream", True), _row("n", "edge", "rule", False),
            _row("never", "tfa", "upstream", True), _row("never", "tfa", "rule", True),
            _row("never", "edge", "upstream", True), _row("never", "edge", "rule", False))
    both = Sweep(rules=("upstream", "rule"), stages=("tfa", "edge"), steps=3, models=models, rows=rows,
                 variants=(_variant("m", "upstream", 30.0), _variant("m", "rule", 20.0),
                           _variant("n", "upstream", 25.0), _variant("n", "rule", 25.0)))
    line = both.summary()[0]
    assert line.startswith("`rule` changes 3 sites in 3 of 3 models against `upstream`")
    assert "0 better / 1 worse / 0 unchanged" in line
    assert "in 1 compared model it changes decisions at edge only" in line
    assert [c.sqnr_delta_db for c in both.changed] == [{"rule": -10.0}, None, None]


def test_local_paths_are_redacted():
    base = _crafted()
    home = str(Path.home() / "private" / "net.py:Net")
    models = (SweepModel(target=home, error=f"importing {home} failed"),)
    redacted = Sweep(rules=base.rules, stages=base.stages, steps=0, models=models, rows=(), variants=())
    for text in (redacted.to_markdown(), redacted.to_html(), redacted.to_json(), redacted.to_csv()):
        assert str(Path.home()) not in text
    assert "~/private/net.py:Net" in redacted.to_markdown()


def test_markdown_fits_one_github_comment():
    base = _crafted()
    rows = []
    for i in range(400):
        for p, folded in (("upstream", True), ("off", False)):
            site = f"block{i}.conv@net.py:{i}"
            rows.append(SweepRow(target=f"net{i}", stage="tfa", rule=p, sites=1, folded=(site,) if folded else (),
                                 skipped=() if folded else (site,), reasons={} if folded else {site: ("rule-off",)}))
    big = Sweep(rules=base.rules, stages=base.stages, steps=0,
                models=tuple(SweepModel(target=f"net{i}") for i in range(400)),
                rows=tuple(rows), variants=())
    md = big.to_markdown(limit=8000)
    assert len(md) <= 8000
    assert "more changed site(s) left out to fit one GitHub comment" in md
    assert "`off` changes 400 sites in 400 of 400 models" in md

"""A newcomer's first hour without a stumble (issue 60): each input that used to hang, crash, mislead or say nothing
is one line (exit status 2 on the command line) naming what is wrong, before any model work, and what a table shows
says what it means.

The command line runs as users run it (``python -m inspector`` in a subprocess, with a timeout: a hang fails the
test instead of stopping the suite); the child's CPU time is what "before any work" is measured by, since the wall
time of a loaded machine says little.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import time
import wave

import numpy as np
import pytest
import torch

import inspector
from inspector import InspectorError
from inspector._cost import accelerators as _accelerators
from inspector._front import cli
from inspector._targets import load as _load
from inspector._targets.streams import read_npy, read_wav, read_wav_header
from inspector.present import tables
from conftest import ROOT

HANG = 120  # seconds: a command still running after this has hung (each of these answers in seconds)
PARSER_CPU = 10.0  # seconds of CPU a command may spend refusing input the parser can reject


def _cli(*argv: str, timeout: float = HANG) -> tuple[int, str, str, float]:
    """``python -m inspector ARGV`` in a fresh process: (exit status, stdout, stderr, CPU seconds it used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "inspector", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done.returncode, done.stdout, done.stderr, cpu


def _one_line(code: int, out: str, err: str, message: str) -> None:
    assert code == 2, (code, out, err)
    assert out == "", out
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert "internal error" not in err and "Traceback" not in err


MODEL = textwrap.dedent('''
    import torch
    from torch import nn

    class Net(nn.Module):
        """A conv times a scalar and no example_inputs(): the README's model.py:Net."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x) * 0.5

    class Listener(nn.Module):
        """Audio frames of 256 samples at 8 kHz through a conv1d times a scalar."""

        SAMPLE_RATE = 8000

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 2, 5, padding=2)

        def forward(self, x):
            return self.conv(x) * 0.5

        def example_inputs(self):
            return (torch.zeros(1, 1, 256),)

    class MaskedConv(nn.Module):
        """Padded sequences masked by their lengths, the mask read from ``lengths.max()`` as torchaudio's Conformer
        (ExecuTorch's Arm test model) reads it: only a strict export captures it."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = nn.Conv2d(16, 16, (1, 3), padding=(0, 1))

        def forward(self, x, lengths):
            steps = int(torch.max(lengths).item())
            mask = torch.arange(steps, dtype=lengths.dtype).expand(lengths.shape[0], steps) >= lengths.unsqueeze(1)
            return (self.conv(x) * 0.5).masked_fill(mask[:, None, None, :], 0.0)

        def example_inputs(self):
            g = torch.Generator().manual_seed(1)
            return (torch.rand(4, 16, 1, 9, generator=g), torch.tensor([5, 9, 3, 9], dtype=torch.int32))
''')


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return path


def _wav(path, samples: int = 1024, rate: int = 8000) -> bytes:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(rate)
        f.writeframes((np.arange(samples) % 64 - 32).astype("<i2").tobytes())
    return path.read_bytes()


# ---------------------------------------------------------------- 1. a FIFO or a device is never read


@pytest.mark.parametrize("suffix", [".wav", ".npy"])
def test_a_fifo_given_as_a_stream_is_refused_before_it_is_read(tmp_path, model, suffix):
    fifo = tmp_path / f"frames{suffix}"
    os.mkfifo(fifo)  # nobody ever writes: reading it would wait for ever
    target = f"{model}:Listener" if suffix == ".wav" else f"{model}:Net"
    t0 = time.monotonic()
    code, out, err, cpu = _cli("analyze", target, "--stream", str(fifo))
    _one_line(code, out, err, "is a FIFO (a named pipe), not a regular file")
    assert cpu < PARSER_CPU, cpu
    with pytest.raises(InspectorError, match="is a FIFO"):  # the API's readers too, at once
        read_npy(fifo) if suffix == ".npy" else read_wav(fifo, (1, 1, 256), 8000)
    assert time.monotonic() - t0 < HANG


def test_a_device_given_as_a_stream_is_refused_before_it_is_read(tmp_path, model):
    zero = tmp_path / "zero.npy"
    zero.symlink_to("/dev/zero")  # a name that looks like a stream, and a file that never ends
    code, out, err, cpu = _cli("analyze", f"{model}:Net", "--stream", str(zero))
    _one_line(code, out, err, "is a character device, not a regular file")
    assert cpu < PARSER_CPU, cpu
    code, out, err, _ = _cli("analyze", f"{model}:Net", "--stream", "/dev/zero")
    _one_line(code, out, err, "--stream reads a .npy array of frames or a .wav recording")
    for reader in (lambda p: read_npy(p), lambda p: read_wav_header(p)):
        with pytest.raises(InspectorError, match="character device"):
            reader(zero)
    with pytest.raises(InspectorError, match="is a directory"):
        read_npy(tmp_path)


# ---------------------------------------------------------------- 2. a .wav cut short, empty, or lying


def _cut(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_each_broken_wav_says_what_is_wrong(tmp_path):
    whole = _wav(tmp_path / "whole.wav")  # 44 bytes of header, 2,048 of samples
    assert len(read_wav(tmp_path / "whole.wav", (1, 1, 256), 8000)) == 4
    cases = {
        "odd.wav": (whole[:44 + 1001], "is cut short: its header says 2,048 bytes of samples (1,024 samples) but the "
                                       "file holds 1,001 bytes after the header (it ends in the middle of a sample)"),
        "lying.wav": (whole[:44 + 1000], "header says 2,048 bytes of samples (1,024 samples) but the file holds "
                                         "1,000 bytes"),
        "empty.wav": (b"", "is empty (0 bytes)"),
        "twenty.wav": (whole[:20], "is cut short (20 bytes): its 'fmt ' chunk says 16 bytes but only 0 of them"),
        "noise.wav": (b"\x00" * 20, "is not a .wav file (20 bytes; it starts with"),
        "headless.wav": (whole[:36], "has no data chunk"),
    }
    for name, (data, message) in cases.items():
        path = _cut(tmp_path, name, data)
        for read in (read_wav_header, lambda p: read_wav(p, (1, 1, 256), 8000)):
            with pytest.raises(InspectorError) as info:
                read(path)
            assert message in str(info.value) and "\n" not in str(info.value), (name, str(info.value))
    odd = bytearray(whole)
    odd[40:44] = (2047).to_bytes(4, "little")  # the data chunk claims an odd number of bytes, all present
    with pytest.raises(InspectorError, match="not whole 16-bit samples"):
        read_wav_header(_cut(tmp_path, "odd-size.wav", bytes(odd)))
    floats = bytearray(whole)
    floats[20:22] = (3).to_bytes(2, "little")  # IEEE float samples
    with pytest.raises(InspectorError, match="not integer PCM"):
        read_wav_header(_cut(tmp_path, "float.wav", bytes(floats)))


def test_a_cut_wav_is_one_line_on_the_command_line_before_the_model_loads(tmp_path, model):
    whole = _wav(tmp_path / "whole.wav")
    cut = _cut(tmp_path, "cut.wav", whole[:44 + 1001])
    code, out, err, cpu = _cli("compare", f"{model}:Listener", "--stream", str(cut))
    _one_line(code, out, err, "cut.wav is cut short")
    assert cpu < PARSER_CPU, cpu
    empty = _cut(tmp_path, "empty.wav", b"")
    code, out, err, _ = _cli("analyze", f"{model}:Listener", "--stream", str(empty))
    _one_line(code, out, err, "is empty (0 bytes)")


# ---------------------------------------------------------------- 3. a conversion that would lose information


def test_lossy_npy_conversions_are_refused_and_float64_says_it_is_rounded(tmp_path, recwarn):
    frames = np.linspace(-1, 1, 3 * 3 * 8 * 8).reshape(3, 1, 3, 8, 8)
    cases = {
        "complex.npy": (frames + 1j * frames, "holds complex numbers (complex128)"),
        "big.npy": ((frames * 2 ** 30).astype(np.int64), "values up to 1,073,741,824"),
        "huge.npy": (frames * 1e300, "beyond float32's range"),
        "words.npy": (np.array([["a", "b"]] * 3), "holds an array of <U1"),
    }
    for name, (array, message) in cases.items():
        np.save(tmp_path / name, array)
        with pytest.raises(InspectorError) as info:
            read_npy(tmp_path / name)
        assert message in str(info.value) and "\n" not in str(info.value), (name, str(info.value))
    np.save(tmp_path / "double.npy", frames)
    stream = read_npy(tmp_path / "double.npy")
    assert "float64 rounded to float32" in stream.text()
    assert torch.equal(stream.frames[0][0], torch.from_numpy(frames[0]).float())
    np.save(tmp_path / "small.npy", (frames * 100).astype(np.int32))  # exact in float32: read as it is
    assert torch.equal(read_npy(tmp_path / "small.npy").frames[2][0], torch.from_numpy(frames[2] * 100).int().float())
    np.save(tmp_path / "cut.npy", frames.astype(np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:-5])
    with pytest.raises(InspectorError, match="is cut short: its header says a 3x1x3x8x8 float32 array"):
        read_npy(tmp_path / "cut.npy")
    assert not [w for w in recwarn if "imaginary" in str(w.message) or "Casting" in str(w.message)]


def test_a_complex_stream_is_one_line_on_the_command_line(tmp_path, model):
    np.save(tmp_path / "complex.npy", np.ones((2, 1, 3, 8, 8)) * (1 + 1j))
    code, out, err, cpu = _cli("analyze", f"{model}:Net", "--stream", str(tmp_path / "complex.npy"))
    _one_line(code, out, err, "holds complex numbers")
    assert "Casting complex values" not in err
    assert cpu < PARSER_CPU, cpu


# ---------------------------------------------------------------- 4. verdict takes what every command takes


def test_verdict_reads_input_shape_and_stream_through_the_same_helper(tmp_path, model, monkeypatch, capsys):
    """The CLI hands verdict (target, inputs) pairs made by the one helper every model command uses."""
    seen, made = {}, []
    real = cli.inputs_for

    def spy(target, shapes, stream):
        made.append((target, tuple(shapes), stream))
        return real(target, shapes, stream)

    def fake_verdict(targets, **kwargs):
        seen["targets"] = targets
        raise InspectorError("stop here")

    monkeypatch.setattr(cli, "inputs_for", spy)
    monkeypatch.setattr(cli, "verdict", fake_verdict)
    net = f"{model}:Net"
    assert cli.main(["verdict", net, "sample:conv_mul_scalar", "--input-shape", "1,3,8,8"]) == 2
    assert made == [(net, ("1,3,8,8",), None), ("sample:conv_mul_scalar", ("1,3,8,8",), None)]
    (t1, x1), (t2, x2) = seen["targets"]
    assert (t1, t2) == (net, "sample:conv_mul_scalar") and tuple(x1[0].shape) == (1, 3, 8, 8)
    assert torch.equal(x1[0], cli.inputs_for(net, ["1,3,8,8"], None)[0])  # the same seeded tensors as analyze's
    np.save(tmp_path / "frames.npy", np.zeros((3, 1, 3, 8, 8), dtype=np.float32))
    assert cli.main(["verdict", net, "--stream", str(tmp_path / "frames.npy")]) == 2
    ((_, stream),) = seen["targets"]
    assert isinstance(stream, inspector.Stream) and len(stream) == 3
    capsys.readouterr()
    assert cli.main(["verdict", net, "--stream", str(tmp_path / "frames.npy"), "--input-shape", "1,3,8,8"]) == 2
    assert "give --stream or --input-shape, not both" in capsys.readouterr().err


def test_verdict_without_inputs_for_a_model_that_has_none_says_how_to_give_them(model):
    code, out, err, _ = _cli("verdict", f"{model}:Net", "--accelerator", "tosa-int", "--no-fp")
    _one_line(code, out, err, "use --input-shape")


@pytest.mark.requires_tosa
def test_verdict_runs_the_readmes_model_given_an_input_shape(model):
    code, out, err, _ = _cli("verdict", f"{model}:Net", "--input-shape", "1,3,8,8", "--accelerator", "tosa-int",
                             "--no-fp", "--steps", "1", "--workers", "1", "--json", timeout=900)
    assert code == 0, err
    import json

    data = json.loads(out)
    assert [n["target"] for n in data["networks"]] == ["Net"]


# ---------------------------------------------------------------- 6-8. what a comparison's table means, in words


def _outcome(site, folded, conv, mul):
    from inspector._numbers.results import QParams, SiteOutcome

    return SiteOutcome(site_id=site, folded_at="tfa" if folded else None,
                       conv_output=QParams(scale=conv[0], zero_point=conv[1]),
                       mul_output=QParams(scale=mul[0], zero_point=mul[1]) if mul else None)


def _result(rule, markers=(), *, folded=False, cached=False, outputs=None, grids=None):
    """A variant's result as compare makes it, with the fields the notes read."""
    from inspector._numbers.results import Metrics, Variant, VariantResult

    conv, mul = grids or ((0.4, -3), (0.1, -3))
    site = _outcome("conv@m.py:3", folded, mul if folded else conv, None if folded else mul)
    out = outputs if outputs is not None else ((torch.arange(4.0),),)
    return VariantResult(variant=Variant(rule=inspector.rules.get(rule), markers=tuple(markers)),
                         folds={"tfa": int(folded), "lowering": 0},
                         sites=(site,),
                         metrics=tuple(Metrics(output=0, step=s, values=(("sqnr", 30.0),)) for s in range(len(out))),
                         not_delegated=(), timings={},
                         cached=cached, outputs=out)


def _comparison(*results):
    from inspector._numbers.results import Comparison

    return Comparison(target="m", steps=len(results[0].outputs), calibration="calibrated", quantization="a8w8",
                      results=results)


def test_a_marker_under_a_rule_that_reads_none_says_so_in_the_table():
    cmp = _comparison(_result("off", ["conv@m.py:3"]), _result("upstream", ["conv@m.py:3"], folded=True),
                      _result("state-aware", ["conv@m.py:3"], outputs=((torch.ones(4),),)))
    rows = {r["variant"] for r in tables.comparison_rows(cmp)}
    assert rows == {"off+marked(conv@m.py:3) (markers ignored)", "upstream+marked(conv@m.py:3) (markers ignored)",
                    "state-aware+marked(conv@m.py:3)"}
    notes = tables.comparison_notes(cmp)
    assert any(n.startswith("upstream+marked(conv@m.py:3): the marker conv@m.py:3 changes nothing under upstream: "
                            "it has no state guard") for n in notes)
    assert any("changes nothing under off: it never folds" for n in notes)
    assert not any(n.startswith("state-aware+marked") for n in notes)
    text, html = tables.comparison_text(cmp), tables.comparison_html(cmp)
    assert "(markers ignored)" in text and "changes nothing under upstream" in html


def test_an_analysis_with_a_marker_under_upstream_says_it_changes_nothing(capsys):
    site = inspector.analyze("sample:functional_recurrent_conv_mul", stage="tfa").sites[0].id
    assert cli.main(["analyze", "sample:functional_recurrent_conv_mul", "--stage", "tfa", "--mark", site]) == 0
    out = capsys.readouterr().out
    assert f"note: the marker {site} changes nothing under upstream" in out
    assert cli.main(["analyze", "sample:functional_recurrent_conv_mul", "--stage", "tfa", "--mark", site,
                     "--rule", "state-aware"]) == 0
    assert "changes nothing" not in capsys.readouterr().out


def test_a_variant_answered_by_another_says_whose_run_it_is():
    cmp = _comparison(_result("off"), _result("upstream", folded=True),
                      _result("state-aware-strict", cached=True), _result("state-aware", cached=True, folded=True))
    variants = [r["variant"] for r in tables.comparison_rows(cmp)]
    assert variants == ["off", "upstream", "state-aware-strict (same folds as off)",
                        "state-aware (same folds as upstream)"]
    notes = tables.comparison_notes(cmp)
    assert ("state-aware-strict is marked 'same folds as off': it folds exactly where off does (at no site), so it is "
            "the same quantized program and its numbers are that run's, not a second lowering") in notes
    assert any("where upstream does (at conv@m.py:3 at tfa)" in n for n in notes)
    alone = _comparison(_result("upstream", cached=True, folded=True))
    assert [r["variant"] for r in tables.comparison_rows(alone)] == ["upstream (earlier run)"]
    assert any("upstream is marked 'earlier run'" in n for n in tables.comparison_notes(alone))
    assert "(cached)" not in tables.comparison_text(cmp) + tables.comparison_text(alone)


def test_equal_numbers_are_explained_only_when_they_are_equal():
    same = ((torch.arange(4.0),), (torch.ones(4),))
    cmp = _comparison(_result("off", outputs=same), _result("upstream", folded=True, outputs=same))
    note = tables.equal_numbers_note(cmp)
    assert note.startswith("every variant gives the same quantized outputs at every step (compared bit for bit) "
                           "though they fold differently (off folds no site; upstream folds conv@m.py:3)")
    assert "the installed pass folds at tfa" in note and "before calibration" in note
    assert "on the grid the unfolded mul's output had (scale 0.1, zero point -3)" in note
    assert "the unfolded conv's grid is 4x that one with the same zero point" in note
    assert "scale-equivariant" in note and note in tables.comparison_notes(cmp)
    # one step of one output differs by one quantization step: nothing is said
    other = ((torch.arange(4.0),), (torch.tensor([1.0, 1.0, 1.0, 1.25]),))
    assert tables.equal_numbers_note(_comparison(_result("off", outputs=same),
                                                 _result("upstream", folded=True, outputs=other))) == ""
    # equal outputs, but grids the qparams do not relate: it says they are equal, not why in grids
    odd = _comparison(_result("off", outputs=same, grids=((0.37, 1), (0.1, -3))),
                      _result("upstream", folded=True, outputs=same))
    assert "every variant gives the same" in tables.equal_numbers_note(odd)
    assert "grid" not in tables.equal_numbers_note(odd)
    # every variant folds alike: equal by construction, no note; nor without outputs (a comparison read from JSON)
    assert tables.equal_numbers_note(_comparison(_result("off", outputs=same),
                                                 _result("state-aware-strict", outputs=same))) == ""
    assert tables.equal_numbers_note(_comparison(_result("off", outputs=()), _result("upstream", outputs=(),
                                                                                      folded=True))) == ""


@pytest.mark.requires_tosa
def test_the_headline_sample_and_the_demo_say_why_every_rule_gives_the_same_numbers(tmp_path):
    """stateful_conv_mul over 20 steps (the README's command): equal under every rule, and the demo says why; over
    1 step the numbers differ, and nothing is said."""
    code, out, err, _ = _cli("demo", "--html", str(tmp_path / "demo.html"), timeout=900)
    assert code == 0, err
    assert "every variant gives the same quantized outputs at every step (compared bit for bit)" in out
    assert "before calibration, so the observers calibrate the graph already folded" in out
    assert "scale-equivariant under per-tensor activation quantization" in out
    assert "(same folds as off)" in out and "(cached)" not in out
    assert "scale-equivariant" in (tmp_path / "demo.html").read_text()
    one = inspector.compare("sample:stateful_conv_mul", variants=("off", "upstream"), steps=1)
    assert one.result("off").metrics != one.result("upstream").metrics  # they differ: nothing to explain
    assert tables.equal_numbers_note(one) == ""


# ---------------------------------------------------------------- 9. accelerator settings before any work


@pytest.mark.parametrize("argv, message", [
    (["compare", "sample:conv1d_mul", "--accelerator", "ethos-u85-256:Bogus_Mode"],
     "unknown memory mode 'Bogus_Mode' for ethos-u85-256: Vela's config file (Arm/vela.ini) names only: Sram_Only"),
    (["analyze", "sample:conv1d_mul", "--accelerator", "ethos-u85-256:Sram_Only:Bogus_System"],
     "unknown system config 'Bogus_System' for ethos-u85-256"),
    (["sweep", "sample:conv1d_mul", "--steps", "1", "--accelerators", "tosa-int,ethos-u55-128:Bogus_Mode"],
     "unknown memory mode 'Bogus_Mode' for ethos-u55-128"),
    (["verdict", "sample:conv1d_mul", "--accelerator", "ethos-u85-256:Bogus_Mode"], "unknown memory mode"),
    (["compare", "sample:conv1d_mul", "--accelerator", "ethos-u55-128:Dedicated_Sram"],
     "Vela cannot configure ethos-u55-128 with Ethos_U55_High_End_Embedded and Dedicated_Sram"),
])
def test_accelerator_settings_are_refused_while_parsing(argv, message):
    code, out, err, cpu = _cli(*argv)
    _one_line(code, out, err, message)
    assert cpu < PARSER_CPU, (cpu, err)


def test_the_quick_settings_check_reads_the_file_executorch_hands_vela():
    """The names are checked against the config file ExecuTorch's compile spec really names (no copy drifts)."""
    flags = dict(f[2:].split("=", 1) for f in _accelerators.accelerators.get("ethos-u85-256").vela().flags
                 if f.startswith("--") and "=" in f)
    assert flags["config"] == _accelerators.CONFIG_FILE
    with pytest.raises(InspectorError, match="names only: .*Dedicated_Sram"):
        inspector.compare("sample:conv1d_mul", accelerator="ethos-u65-256:Nope")  # the API, before loading


# ---------------------------------------------------------------- 10. a model only a strict export captures


def test_a_module_that_exports_only_strict_loads_and_says_so(model, capsys):
    with pytest.raises(Exception, match="GuardOnDataDependentSymNode|data-dependent"):
        torch.export.export(_load.import_file(model).MaskedConv().eval(),
                            _load.import_file(model).MaskedConv().example_inputs())  # the default: non-strict
    target = _load.load(f"{model}:MaskedConv")
    assert target.export == _load.STRICT and "torch.export.export(strict=True)" in target.export
    assert "as ExecuTorch's own test harness exports it" in target.notes[0]
    assert "GuardOnDataDependentSymNode" in target.notes[0]
    assert _load.load("sample:conv_mul_scalar").export == _load.NON_STRICT
    result = inspector.analyze(f"{model}:MaskedConv", stage="tfa")
    assert [s.decision for s in result.sites] == ["fold"] and target.notes[0] in result.notes
    assert cli.main(["analyze", f"{model}:MaskedConv", "--stage", "tfa"]) == 0
    assert "note: MaskedConv was exported with torch.export.export(strict=True)" in capsys.readouterr().out


def test_a_model_no_export_captures_names_both_failures(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent('''
        import torch
        from torch import nn

        class Branchy(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3)
            def forward(self, x):
                y = self.conv(x)
                return y * 0.5 if y.sum() > 0 else y
            def example_inputs(self):
                return (torch.ones(1, 3, 8, 8),)
    '''))
    with pytest.raises(InspectorError) as info:
        _load.load(f"{bad}:Branchy")
    text = str(info.value)
    assert text.startswith("torch.export failed for Branchy") and "and with strict=True" in text
    assert "\n" not in text

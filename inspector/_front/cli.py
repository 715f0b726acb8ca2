"""``python -m inspector``: analyze or draw a model from the shell, or run the demo.

Bad input prints one line (``error: ...``) and exits with status 2; ``--debug``
prints the whole traceback before it (the cause's too), and with ``--json`` stdout gets
``{"error": line, "details": traceback}``.
"""

from __future__ import annotations

import time
import argparse
import json
import logging
import os
import sys
import traceback
import warnings
from pathlib import Path
from dataclasses import replace

from .._base.errors import InspectorError, describe, quoted
from .._rules.rules import rules
from .._decide.stages import STAGES, STAGE_HELP, STEPS_HELP
from .._rules.rules import BUILT_IN, DEFAULT_VARIANTS
from .._base.limits import MAX_STEPS
from .._targets.load import load, random_inputs
from .._targets.streams import read_npy, read_wav, read_wav_header
from .._decide.decide import analyze
from ..present.tables import analysis_text
from .._numbers.compare import compare
from ..present.tables import comparison_html, comparison_text
from .._base.limits import check_steps
from .._numbers.engines import TOSA, engines
from .._cost.accelerators import DEFAULT as DEFAULT_ACCELERATOR, FORM as ACCELERATOR_FORM, accelerator_of, accelerators
from .._numbers.quantization import quantizations
from .._numbers.compare import variants_of
from ..present.tables import attribution_text
from .._numbers.attribution import attribution
from .._advise.advise import DEFAULT_ACCELERATOR as ADVISE_ACCELERATOR, WHY_ACCELERATOR as WHY_ADVISE_ACCELERATOR, advise
from .._advise.verdict import (DEFAULT_ACCELERATORS as VERDICT_ACCELERATORS, WHY_ACCELERATORS as
                               WHY_VERDICT_ACCELERATORS, accelerators_names, verdict)
from ..present.advice import advice_text
from .._base.files import check_writable, write_text
from .._journey.journey import journey
from .._base.files import write_bytes
from ..present.render import pipe, svg
from ..present import explorer
from .._targets.samples import default, samples
from ..present.markup import escape, page
from ..present.tables import analysis_html
from .._sweep.sweep import sweep
from .._base.store import location
from .repro import reproducer

DESCRIPTION = "Inspect ExecuTorch's Arm FoldScalarMulIntoConvPass: which conv->mul sites fold, and why not."


def _quiet_imports() -> None:
    # torch/torchao log import-time noise (optional CUDA kernels, pytree deprecations) that
    # says nothing about the user's model; keep the terminal for the inspector's own output.
    for name in ("torchao", "torch.utils._pytree", "torch._export", "torch.export"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


_MAX_USAGE_ERROR = 300  # argparse quotes the user's text whole: a 5,000-digit --steps stays one readable line


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one short ``error:`` line (exit 2) like every other error."""

    def error(self, message: str):  # argparse's hook
        hint = f" (see: {self.prog} --help)"
        message = " ".join(message.split())
        if len(message) > _MAX_USAGE_ERROR:
            message = message[: _MAX_USAGE_ERROR - 1] + "…"
        self.exit(2, f"error: {message}{hint}\n")

    def _get_values(self, action, arg_strings):  # argparse's hook
        # Python 3.11's argparse drops the "--" of "--steps=--" and hands the option an empty
        # list instead of a value; the commands would then fail on a list where a number belongs.
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
        return super()._get_values(action, arg_strings)


def _workers(text: str) -> int:
    """--workers, checked while parsing: compare would check it only after loading the model
    and running the float reference."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {_short(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"workers must be a positive integer, got {value:,}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m inspector", description=DESCRIPTION)
    p.add_argument("--debug", action="store_true",
                   help="show tracebacks for errors, and what the backend printed (TOSA reference model warnings)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    model_command = _model_command_factory(sub)
    _number_commands(model_command)
    _picture_commands(model_command)
    _other_commands(sub)
    return p


def _model_command_factory(sub):
    """``model_command(name, help, ...)``: a subcommand that takes a model (TARGET, --input-shape,
    --mark, and usually --stage/--rule)."""

    def model_command(name: str, help: str, *, stage_and_rule: bool = True, mark_help: str = "",
                      markers: bool = True):
        """A subcommand that takes a model: TARGET, --input-shape, --mark, and usually --stage/--rule."""
        cmd = sub.add_parser(name, help=help, description="TARGET is sample:NAME, path/to/file.py:ClassName, "
                             "model.pt2, or timm:NAME@SIZE.")
        cmd.add_argument("target", metavar="TARGET")
        inputs_arguments(cmd)
        if stage_and_rule:
            cmd.add_argument("--stage", choices=STAGES, default=None,
                             help="which graph the pass receives: " + "; ".join(f"{k}: {v}" for k, v in STAGE_HELP.items())
                             + f" (default: {STAGE_DEFAULT_HELP})")
            cmd.add_argument("--rule", "--policy", dest="rule", default="upstream", metavar="RULE",
                             help="; ".join(f"{k}: {v}" for k, v in rules.help().items())
                             + "; or path/to/rules.py:NAME, a rule of your own (a guard or a pass class: the file "
                             "is code you run, as a model file is) (default: upstream; --policy is the same flag)")
        if markers:
            cmd.add_argument("--mark", action="append", default=[], metavar="ID",
                             help=mark_help or "mark a site id or node name as carried state (repeatable)")
        return cmd

    return model_command


def inputs_arguments(cmd, each: str = "") -> None:
    """``--input-shape`` and ``--stream``: what a model is fed, as every command that takes a model takes it
    (``each``: said after the help when the command takes several targets and every one is fed the same)."""
    cmd.add_argument("--input-shape", action="append", default=[], metavar="1,3,8,8",
                     help="shape of one example input (repeat per input); random seeded float32" + each)
    cmd.add_argument("--stream", default=None, metavar="FILE",
                     help="a new input at every step, read from FILE: a .npy array (T, *input shape) of real numbers, "
                          "or a .wav (16-bit mono PCM, at the model's SAMPLE_RATE) cut into frames of the model's "
                          "input; a regular file (not a pipe or a device); its length is the default number of steps"
                          + each)


def _number_commands(model_command) -> None:
    """analyze, compare, attribute and report."""

    a = model_command("analyze", "list every conv->mul site, its decision and reasons")
    a.add_argument("--json", action="store_true", help="print JSON instead of a table")
    accelerator_argument(a, FLOW_HELP)

    c = model_command("compare", "quantize each variant, run the TOSA INT reference model, compare with float",
                      stage_and_rule=False,
                      mark_help="mark a site id or node name as carried state in every variant (repeatable)")
    c.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), metavar="P[@Q],...",
                   help=f"comma-separated rules to compare, each optionally @QUANTIZATION "
                        f"(upstream@a16w8) (default: {','.join(DEFAULT_VARIANTS)})")
    quantization_arguments(c)
    c.add_argument("--steps", type=int, default=None,
                   help=f"recurrent steps to run, 1 to {MAX_STEPS} (default: {STEPS_HELP})")
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")
    c.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="processes running variants side by side (default: the cores available; 1: one after another)")
    c.add_argument("--metrics", default=None, metavar="M,...",
                   help="the measurements to compute (inspector.metrics(): sqnr, max-abs, ..., accuracy, "
                        "decision-mismatch@0.5, or one a --rule or model file registers) (default: the built-ins and "
                        "the task's own)")
    engine_argument(c)

    t = model_command("attribute", "where the quantization error enters: per-node error of each variant and step",
                      stage_and_rule=False,
                      mark_help="mark a site id or node name as carried state in every variant (repeatable)")
    t.add_argument("--variants", default="off,upstream", metavar="P[@Q],...",
                   help="comma-separated rules to compare, each optionally @QUANTIZATION (default: off,upstream)")
    quantization_arguments(t)
    t.add_argument("--steps", type=int, default=None,
                   help=f"recurrent steps to run, 1 to {MAX_STEPS} (default: {STEPS_HELP})")
    t.add_argument("--json", action="store_true", help="print JSON instead of tables")
    engine_argument(t)

    v = model_command("advise", "which sites should fold on an Ethos-U within a budget of dB: each site's price in "
                      "cycles (Vela) and dB, every set measured, the best confirmed on TOSA", stage_and_rule=False,
                      markers=False)
    npus = [n for n in accelerators.names() if accelerators.get(n).costs]
    v.add_argument("--accelerator", type=_accelerator, default=ADVISE_ACCELERATOR, metavar="NAME",
                   help="the Ethos-U whose cycles Vela counts: " + ", ".join(npus) + f", or {ACCELERATOR_FORM} "
                        f"(default: {ADVISE_ACCELERATOR}, because {WHY_ADVISE_ACCELERATOR})")
    v.add_argument("--budget-db", type=float, default=None, metavar="DB",
                   help="the SQNR (worst output, worst step) you accept losing against the most accurate set "
                        "found, on the calibration inputs (default: 1)")
    v.add_argument("--budget", type=_budget_pair, default=None, metavar="MEASUREMENT=AMOUNT",
                   help="the budget in another measurement with a direction (inspector.metrics(): e.g. "
                        "max-abs=0.05), instead of --budget-db")
    v.add_argument("--steps", type=int, default=None,
                   help=f"recurrent steps to run, 1 to {MAX_STEPS} (default: {STEPS_HELP})")
    v.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="processes running the TOSA variants side by side (default: the cores available)")
    v.add_argument("--keep-rule", default=None, metavar="FILE.py",
                   help="also write the advice as a rule file, loadable with --rule FILE.py:NAME")
    v.add_argument("--json", action="store_true", help="print JSON instead of the tables")

    rep = model_command("report", "a report for an issue thread: self-contained HTML, a Markdown reply, or JSON")
    rep.add_argument("--variants", default=None, metavar="P,P,...",
                   help="also run these rules on the TOSA INT reference and add the comparison")
    rep.add_argument("--steps", type=int, default=None,
                     help=f"recurrent steps for --variants, 1 to {MAX_STEPS} (default: {STEPS_HELP})")
    rep.add_argument("--format", choices=("html", "md", "json"), default="md", help="default: md")
    rep.add_argument("--out", default=None, metavar="FILE", help="write it here (default: stdout)")
    engine_argument(rep)
    rep.add_argument("--advise", action="store_true",
                     help="also say which sites should fold on --accelerator (an Ethos-U) within --budget-db")
    rep.add_argument("--budget-db", type=float, default=1.0, metavar="DB",
                     help="the SQNR you accept losing, for --advise (default: 1)")
    rep.add_argument("--full-traces", action="store_true",
                   help="keep every frame of stack traces (default: the user's frames only)")


def _picture_commands(model_command) -> None:
    """repro, render, journey and explorer."""

    rp = model_command("repro", "write a standalone pytest file reproducing one site (imports only torch and executorch)",
                       stage_and_rule=False, markers=False)
    rp.add_argument("--site", required=True, metavar="ID", help="the site id (see analyze)")
    rp.add_argument("--stage", choices=STAGES, default=None,
                    help=f"the stage whose graph the test runs the pass on (default: {STAGE_DEFAULT_HELP})")
    accelerator_argument(rp, FLOW_HELP)
    rp.add_argument("--out", default="test_repro.py", metavar="FILE", help="default: test_repro.py")

    r = model_command("render", "draw the graph before/after the fold, sites highlighted (graphviz)")
    r.add_argument("--which", choices=("before", "after", "both"), default="before",
                   help="the graph the pass received, the graph after it, or both side by side (default: before)")
    r.add_argument("--focus", default=None, metavar="ID", help="draw only this site and its neighbourhood")
    r.add_argument("--hops", type=int, default=2, help="neighbourhood size around --focus, in edges (default: 2)")
    r.add_argument("--format", choices=("svg", "png", "dot"), default=None,
                   help="output format (default: from the --out suffix, else svg); dot needs no graphviz install")
    r.add_argument("--out", required=True, metavar="FILE", help="where to write the picture")
    accelerator_argument(r, FLOW_HELP)

    j = model_command("journey", "follow one site through the installed Arm pipeline: every pass that touched it",
                      stage_and_rule=False, markers=False)
    j.add_argument("--site", required=True, metavar="ID", help="the site id, its index, or its mul's name (see analyze)")
    j.add_argument("--variant", default="upstream", metavar="RULE", help="the fold rule to follow it under (default: upstream)")
    j.add_argument("--stage", choices=STAGES, default=None,
                   help=f"where the site is found and decided (default: {STAGE_DEFAULT_HELP})")
    j.add_argument("--tosa", action="store_true", help="also run the lowered program on the TOSA reference model")
    j.add_argument("--all-passes", action="store_true", help="list every pass, not only those that touched the site")
    accelerator_argument(j)
    j.add_argument("--json", action="store_true", help="print JSON instead of the timeline")

    e = model_command("explorer", "write the whole graph and its overlays for Google's Model Explorer (big graphs)")
    e.add_argument("--out", required=True, metavar="DIR", help="folder to write graph.json and the node data into")
    e.add_argument("--which", choices=("before", "after"), default="before",
                   help="the graph the pass received, or the graph after it (default: before)")
    e.add_argument("--errors", default=None, metavar="RULE",
                   help="also overlay each node's measured SQNR for this variant (runs the quantized model)")
    e.add_argument("--steps", type=int, default=None,
                   help=f"recurrent steps for --errors, 1 to {MAX_STEPS} (default: {STEPS_HELP})")
    e.add_argument("--serve", action="store_true", help="then start Model Explorer on them and print its local URL")
    e.add_argument("--host", default="127.0.0.1", help="where --serve listens (default: 127.0.0.1)")
    e.add_argument("--port", type=int, default=8080, help="the port --serve listens on (default: 8080)")
    e.add_argument("--json", action="store_true", help="print what was written as JSON")
    accelerator_argument(e, FLOW_HELP)


def _other_commands(sub) -> None:
    """demo, samples and sweep."""

    d = sub.add_parser("demo", help="analyze the default sample under each built-in rule, compare their quantized "
                       "numbers; write an HTML report")
    d.add_argument("--sample", default=None, help="sample name (default: the default sample)")
    d.add_argument("--stage", choices=STAGES, default="tfa", help="the stage to decide at (default: tfa, where the "
                   "INT flow folds)")
    d.add_argument("--steps", type=int, default=None,
                   help=f"run each built-in rule on the TOSA INT reference model for this many steps and compare, 1 "
                        f"to {MAX_STEPS} (default: {STEPS_HELP})")
    d.add_argument("--no-numbers", dest="numbers", action="store_false",
                   help="decide only: no numbers, nothing lowered")
    d.add_argument("--html", default="demo-report.html", metavar="FILE", help="where to write the report")

    sub.add_parser("samples", help="list the built-in sample models")
    _widen_command(sub)

    vd = sub.add_parser("verdict", help="what PR #21234's guard does and costs in the installed executorch, on your "
                        "models: the Markdown reply for the pull request",
                        description="TARGET is sample:NAME, path/to/file.py:ClassName, model.pt2, or timm:NAME@SIZE "
                                    "(several allowed). For each: where each flow folds (INT per accelerator, and the "
                                    "FP flow), what upstream, state-aware (its structural check, its marker) and "
                                    "state-aware-strict decide there, and what skipping the sites feeding state costs "
                                    "(Vela's cycles, the TOSA reference model's dB and the task's own measures).")
    vd.add_argument("targets", nargs="+", metavar="TARGET")
    inputs_arguments(vd, " (every TARGET is fed the same)")
    vd.add_argument("--accelerator", "--accelerators", dest="accelerators", type=_int_accelerators,
                    default=",".join(VERDICT_ACCELERATORS), metavar="A,B",
                    help=_WhenShown(lambda: "comma-separated INT accelerators whose flow is measured: "
                                    + ", ".join(accelerators_names())
                                    + f", or {ACCELERATOR_FORM} (default: {','.join(VERDICT_ACCELERATORS)}, because "
                                    + WHY_VERDICT_ACCELERATORS + ")"))
    vd.add_argument("--steps", type=int, default=None,
                    help=f"steps every variant runs, 1 to {MAX_STEPS} (default: {STEPS_HELP})")
    vd.add_argument("--quantization", type=_quantization_name, default=None, metavar="NAME",
                    help="what every INT variant runs under, named in every table: "
                         + "; ".join(f"{k}: {v}" for k, v in quantizations.help().items()) + " (default: a8w8)")
    vd.add_argument("--pr-pass", dest="pr_pass", type=_pass_file, default=None, metavar="FILE.py",
                    help="PR #21234's own fold_scalar_mul_into_conv_pass.py (its arm_pass_utils.py beside it): the "
                         "structural-check and marker columns run it instead of this project's re-implementation")
    vd.add_argument("--no-fp", dest="fp", action="store_false", help="leave the FP flow (tosa-fp) out")
    vd.add_argument("--workers", type=_workers, default=None, metavar="N",
                    help="processes running the variants side by side (default: the cores available)")
    vd.add_argument("--out", default=None, metavar="FILE", help="write the reply here (default: stdout)")
    vd.add_argument("--json", action="store_true", help="print JSON instead of the Markdown reply")

    w = sub.add_parser("sweep", help="decide (and compare) many models under several rules: one table for a pull request",
                       description="TARGET is sample:NAME, path/to/file.py:ClassName, model.pt2, or timm:NAME@SIZE; "
                       "--models reads a TOML file of [[model]] tables (target, input_shape, steps, name).")
    w.add_argument("targets", nargs="*", metavar="TARGET")
    w.add_argument("--models", action="append", default=[], metavar="FILE.toml",
                   help="a TOML file listing models (repeatable); relative paths are relative to the file")
    w.add_argument("--samples", action="store_true", help="every built-in sample model")
    w.add_argument("--exclude", action="append", default=[], metavar="NAME",
                   help="leave this model out (a sample name or a model's label; repeatable)")
    w.add_argument("--input-shape", action="append", default=[], metavar="1,3,8,8",
                   help="shape of one example input for the TARGETs given here (repeat per input)")
    w.add_argument("--rules", "--policies", dest="rules", default="upstream,state-aware", metavar="R,S",
                   help="comma-separated rules, the first the baseline; names or path/to/rules.py:NAME "
                   "(default: upstream,state-aware; --policies is the same flag)")
    w.add_argument("--stages", default="tfa", metavar="S,S",
                   help=f"comma-separated stages to decide, of {', '.join(STAGES)} (default: tfa)")
    w.add_argument("--compare", action="store_true",
                   help="also run each rule on the TOSA INT reference (implied by --steps and --variants)")
    w.add_argument("--steps", type=int, default=None,
                   help=f"the steps every model's comparison runs, 1 to {MAX_STEPS} (default: each model's own, "
                        f"{STEPS_HELP}; a model list's steps = 0 never compares that model)")
    w.add_argument("--variants", default=None, metavar="P[@Q],...",
                   help="compare these variants instead of the rules (upstream@a8w8,upstream@a16w8)")
    w.add_argument("--out", default=None, metavar="DIR",
                   help="the folder of the result store to keep every result in as it finishes (default: the store "
                        "in use, FOLD_INSPECTOR_STORE); the same sweep run again reads them back")
    w.add_argument("--format", choices=("md", "html", "json", "csv"), default="md", help="what stdout gets (default: md)")
    w.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: worker processes on this machine; ray: Ray tasks (pip install 'fold-inspector[ray]')")
    w.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="worker processes (default: the cores available)")
    w.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="a running Ray cluster (default: start a local one)")
    engine_argument(w, several=True)
    w.add_argument("--advise-db", type=float, default=None, metavar="DB",
                   help="also advise every model on every Ethos-U of --accelerators within this budget of dB: which "
                        "sites should fold, and what upstream and state-aware give up against it")
    w.add_argument("--confirm", action="store_true",
                   help="with --engine simulation: then run on the TOSA reference the variants of every model whose "
                   "decisions at tfa differ between the rules; the table marks the numbers that stay simulated")


class _WhenShown(str):
    """A help text written when ``--help`` prints it, not when the parser is built: which accelerators quantize is
    read from ExecuTorch's Ethos-U compile specs, seconds of imports every command (an error, ``list``) would pay."""

    def __new__(cls, write):
        text = super().__new__(cls, "(written when shown)")
        text._write = write
        return text

    def __mod__(self, params):  # argparse expands a help text with ``help % params``
        return self._write() % params


def _short(text: str, limit: int = 60) -> str:
    """``repr`` of a user string, clipped: an error line stays one readable line."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _example_inputs(args):
    """The example inputs a model command runs on: a stream read from ``--stream``, or ``--input-shape``'s random
    tensors, or None (the model's own)."""
    return inputs_for(args.target, args.input_shape, getattr(args, "stream", None))


def inputs_for(target: str, shapes: list[str], stream: str | None):
    """What ``target`` is fed, from ``--input-shape`` and ``--stream`` (every command that takes a model, ``verdict``
    included, reads them here): a stream read from the file, ``--input-shape``'s random tensors, or None (the
    model's own). A bad file is one line before the model is loaded; a .wav needs the model's input shape and
    SAMPLE_RATE to be cut into frames."""
    if stream is None:
        return _inputs_from_shapes(shapes)
    if shapes:
        raise InspectorError("give --stream or --input-shape, not both: a stream's frames are the inputs")
    if stream.endswith(".npy"):
        return read_npy(stream)
    if stream.endswith(".wav"):
        read_wav_header(stream)  # a FIFO, a device, a cut or lying recording: one line before any model work
        model = load(target)  # its input shape and rate say how to cut the recording
        rate = getattr(model.model, "SAMPLE_RATE", None)
        if rate is None:
            raise InspectorError(f"{target} declares no SAMPLE_RATE (Hz) to read a .wav at: give the frames as "
                                 "a .npy array instead")
        return read_wav(stream, tuple(model.inputs[0].shape), int(rate))
    raise InspectorError(f"--stream reads a .npy array of frames or a .wav recording, got {_short(stream)}")


def _inputs_from_shapes(shapes: list[str]):
    if not shapes:
        return None
    parsed = []
    for text in shapes:
        try:
            dims = tuple(int(d) for d in text.split(","))
            if not dims or any(d <= 0 for d in dims):
                raise ValueError
        except ValueError:
            raise InspectorError(f"bad --input-shape {_short(text)}: give positive integers separated by commas, "
                                 "e.g. 1,3,8,8") from None
        parsed.append(dims)
    return random_inputs(parsed, "--input-shape")


def _analyze(args) -> int:
    result = analyze(args.target, example_inputs=_example_inputs(args), stage=args.stage,
                     rule=args.rule, markers=args.mark, accelerator=args.accelerator)
    _print_result(args, result, analysis_text)
    return 0


def _widen_command(sub) -> None:
    """widen: which layers need more bits on an Ethos-U, within a budget (inspector._advise.widen)."""
    w = sub.add_parser("widen", help="which layers need more bits: each layer's cycles beside the error entering "
                       "there, and the cheapest set run at 16 bits (or float) that meets a budget",
                       description="TARGET is sample:NAME, path/to/file.py:ClassName, model.pt2, or timm:NAME@SIZE.")
    w.add_argument("target", metavar="TARGET")
    inputs_arguments(w)
    w.add_argument("--accelerator", type=_accelerator, default="ethos-u85-256", metavar="NAME",
                   help="the Ethos-U whose cycles Vela counts (default: ethos-u85-256; a16w8 needs the U85)")
    w.add_argument("--budget", default="sqnr=30", metavar="MEASURE=VALUE",
                   help="what must hold: sqnr=30 (dB, at least), max-abs=0.05 (at most), decision-mismatch@0.55=0, "
                        "accuracy=90 (default: sqnr=30)")
    w.add_argument("--choices", default="a16w8", metavar="Q,...",
                   help="what a candidate may run as: a16w8 (on the NPU), float (the CPU: Vela does not count it) "
                        "(default: a16w8)")
    w.add_argument("--candidates", type=int, default=3, metavar="N",
                   help="candidates the sets are made of, each widened with its readers (default: 3)")
    w.add_argument("--steps", type=int, default=None,
                   help=f"steps (frames) to run, 1 to {MAX_STEPS} (default: {STEPS_HELP})")
    w.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="processes running the lowerings side by side (default: the cores available)")
    w.add_argument("--json", action="store_true", help="print one JSON document instead of the tables")


def _widen(args) -> int:
    from .._advise.widen import widen  # lazy: the CLI's help and its errors import no backend
    from ..present.widen_view import widening_text

    if args.steps is not None:
        check_steps(args.steps, "--steps")
    result = widen(args.target, example_inputs=_example_inputs(args), accelerator=args.accelerator,
                   budget=args.budget, choices=tuple(c.strip() for c in args.choices.split(",") if c.strip()),
                   candidates=args.candidates, steps=args.steps, workers=args.workers, progress=_ProgressBar())
    if args.json:
        _print_json(result.to_dict())
    else:
        print(widening_text(result))
    return 0


def _print_json(data) -> None:
    """Exactly one strict JSON document on stdout (no NaN or Infinity tokens)."""
    print(json.dumps(data, indent=2, allow_nan=False))


def _print_result(args, result, text, errors=()) -> None:
    """A result on stdout: its JSON with ``--json``, else ``text(result)``; either names the executorch it ran on
    (the pass and the flow are that release's: several are supported). ``errors``: what failed on the way, with its
    traceback (``{"variant", "error", "details"}``), added to the JSON as ``"errors"`` when there are any."""
    from .._doors.executorch import installed_version  # lazy: the CLI's help and its errors import no backend

    if args.json:
        _print_json({**result.to_dict(), "executorch": installed_version(), **({"errors": errors} if errors else {})})
    else:
        print(text(result))
        print(f"executorch {installed_version()}")


class _ProgressBar:
    """A one-line progress bar on stderr, only when stderr is a terminal.

    It writes to its own duplicate of stderr's descriptor: while a variant runs, the
    descriptors 1 and 2 are captured (the TOSA reference model writes to them).
    """

    def __init__(self, stream=None) -> None:
        stream = stream or sys.stderr
        self.on = stream.isatty()
        self.stream = stream
        if self.on and stream is sys.stderr:
            try:
                self.stream = os.fdopen(os.dup(stream.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
            except (OSError, ValueError):
                self.stream = stream

    def __call__(self, stage: str, fraction: float) -> None:
        if not self.on:
            return
        filled = int(round(30 * max(0.0, min(1.0, fraction))))
        self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {fraction:4.0%} {stage[:60]:60}")
        self.stream.flush()
        if fraction >= 1.0 and stage == "done":
            self.stream.write("\n")


def _compare(args) -> int:
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    result = compare(args.target, variants=_variants_arg(args), example_inputs=_example_inputs(args),
                     markers=args.mark, steps=args.steps, progress=_ProgressBar(), workers=args.workers,
                     quantization=args.quantization, engine=args.engine, accelerator=args.accelerator,
                     metrics=None if args.metrics is None else [m.strip() for m in args.metrics.split(",") if m.strip()])
    if args.debug:
        for r in result.results:
            if r.log.strip():
                what = (f"why {r.variant.label} failed (the traceback, then what the backend printed)" if r.error
                        else f"what the backend printed while running {r.variant.label}")
                print(f"--- {what}:\n{r.log.rstrip()}", file=sys.stderr)
    # a variant that failed carries its traceback in the JSON too, as a failed command's error does
    _print_result(args, result, comparison_text,
                  errors=[{"variant": r.variant.label, "error": r.error, "details": r.log} for r in result.errors])
    for r in result.errors:  # the others' numbers are printed; this one is named, and the exit says so
        print(f"error: {r.error}", file=sys.stderr)
    return 1 if result.errors else 0


def engine_argument(cmd, *, several: bool = False) -> None:
    """``--engine tosa|simulation`` (what computes the quantized numbers) and ``--accelerator NAME`` (what
    every variant is lowered for: on an Ethos-U, Vela prices it)."""

    cmd.add_argument("--engine", choices=engines.names(), default=TOSA.name,
                     help="what computes the quantized numbers: "
                          + "; ".join(f"{k}: {v}" for k, v in engines.help().items()) + f" (default: {TOSA.name})")
    if several:  # a sweep runs each variant on each accelerator
        cmd.add_argument("--accelerators", "--accelerator", dest="accelerators", default=DEFAULT_ACCELERATOR,
                         type=_accelerator_list, metavar="A,B",
                         help="comma-separated accelerators to lower every variant for (each variant on each; on "
                              "an Ethos-U its row has Vela's cycles): " + ", ".join(accelerators.names())
                              + f", or {ACCELERATOR_FORM} (default: {DEFAULT_ACCELERATOR})")
        return
    accelerator_argument(cmd)


# The default --stage, in words: where the accelerator's flow folds (``inspector.analyze``'s default).
STAGE_DEFAULT_HELP = "where --accelerator's flow folds: tfa for tosa-int and every Ethos-U, lowering for tosa-fp"
FLOW_HELP = ("whose flow hands the pass the tfa and lowering graphs: tosa-int (the generic TOSA-1.0+INT profile), "
             "tosa-fp (the float TOSA-1.0+FP profile: it folds in lowering) or an Ethos-U configuration")


def accelerator_argument(cmd, what: str | None = None) -> None:
    """``--accelerator NAME``: what every variant is lowered for (``inspector.accelerators``; an Ethos-U target with
    its memory mode and system config, ``ethos-u85-256:Dedicated_Sram``, too); ``what`` says what it is for when
    the command lowers no variant (whose flow hands the pass its graph)."""
    what = what or ("what every variant is lowered for: tosa-int (the generic TOSA-1.0+INT profile, no cost) or "
                    "an Ethos-U configuration, whose cost Vela estimates (cycles, NPU operations, memory)")
    cmd.add_argument("--accelerator", type=_accelerator, default=DEFAULT_ACCELERATOR, metavar="NAME",
                     help=f"{what}: " + ", ".join(accelerators.names()) + f", or {ACCELERATOR_FORM}, another memory "
                          f"mode or system config of Vela's config file (default: {DEFAULT_ACCELERATOR})")


def _accelerator(text: str) -> str:
    """--accelerator, checked while parsing: the canonical name of what it names (an unknown one, or a memory mode
    or system config Vela does not take, is an InspectorError that main prints whole: it lists the choices)."""
    return accelerator_of(text).name


def quantization_arguments(cmd) -> None:
    """``--quantization NAME`` (every variant that names none) and ``--keep KEY=VALUE`` overrides."""

    cmd.add_argument("--quantization", default=None, metavar="NAME",
                     help="quantization of the variants that name none: "
                          + "; ".join(f"{k}: {v}" for k, v in quantizations.help().items()) + " (default: a8w8)")
    cmd.add_argument("--keep", action="append", default=[], metavar="KEY=float|NAME",
                     help="in every variant, keep a node name, module path or site id in float (KEY=float) or at "
                          "another quantization (KEY=a16w8) (repeatable)")


def _quantization_name(text: str) -> str:
    """--quantization NAME, checked while parsing (one line listing the registered ones)."""
    try:
        return quantizations.get(text).name
    except InspectorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pass_file(text: str) -> str:
    """--pr-pass FILE.py: an existing Python file, checked while parsing (loaded when the verdict starts)."""
    path = Path(text)
    if path.suffix != ".py" or not path.is_file():
        raise argparse.ArgumentTypeError(f"no such Python file: {text} (give PR #21234's "
                                         "fold_scalar_mul_into_conv_pass.py, its arm_pass_utils.py beside it)")
    return text


def _variants_arg(args):
    """The --variants text, with every --keep override applied to each variant."""
    if not args.keep:
        return args.variants

    overrides = {}
    for item in args.keep:
        key, eq, value = item.rpartition("=")
        if not eq or not key:
            raise InspectorError(f"--keep {quoted(item)}: give KEY=float or KEY=QUANTIZATION, e.g. --keep conv=float")
        overrides[key] = value
    return [replace(v, overrides=tuple(overrides.items())) for v in variants_of(args.variants, args.mark)]


def _attribute(args) -> int:
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    result = attribution(args.target, variants=_variants_arg(args), steps=args.steps, markers=args.mark,
                         example_inputs=_example_inputs(args), progress=_ProgressBar(),
                         quantization=args.quantization, engine=args.engine, accelerator=args.accelerator)
    _print_result(args, result, attribution_text)
    return 0


def _budget_pair(text: str) -> tuple[str, float]:
    """``--budget max-abs=0.05``: a measurement's name and an amount."""
    name, sep, amount = text.partition("=")
    try:
        if not sep or not name.strip():
            raise ValueError
        return name.strip(), float(amount)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MEASUREMENT=AMOUNT (e.g. sqnr=1 or max-abs=0.05), got {text!r}") \
            from None


def _advise(args) -> int:
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    out = check_writable(args.keep_rule) if args.keep_rule else None
    result = advise(args.target, example_inputs=_example_inputs(args), accelerator=args.accelerator,
                    budget_db=args.budget_db, budget=args.budget, steps=args.steps, workers=args.workers,
                    progress=_ProgressBar())
    print(result.to_json() if args.json else advice_text(result))
    if out is not None:
        kept = result.rule(path=out)
        print(f"wrote {out}: rule {kept.name}; use it with --rule {out}:{kept.origin.rpartition(':')[2]}",
              file=sys.stderr)
    return 0


def _report(args) -> int:
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    out = check_writable(args.out) if args.out else None
    result = analyze(args.target, example_inputs=_example_inputs(args), stage=args.stage,
                     rule=args.rule, markers=args.mark, accelerator=args.accelerator)
    comparison = None
    if args.variants:
        comparison = result.compare(args.variants, steps=args.steps, progress=_ProgressBar(), engine=args.engine,
                                        accelerator=args.accelerator)
    advice = None
    if args.advise:
        advice = advise(args.target, example_inputs=_example_inputs(args), accelerator=args.accelerator,
                        budget_db=args.budget_db, steps=args.steps, progress=_ProgressBar())
    text = result.report(comparison, format=args.format, full_traces=args.full_traces, advice=advice)
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        write_text(out, text)
        print(f"wrote {out} ({args.format}): {result.summary()}", file=sys.stderr)
    return 0


def _repro(args) -> int:

    out = check_writable(args.out)
    result = analyze(args.target, example_inputs=_example_inputs(args), stage=args.stage, rule="upstream",
                     accelerator=args.accelerator)
    repro = reproducer(result, site_id=args.site, file=out.name)
    repro.write(out)
    verb = "folds" if repro.decision == "fold" else "skips"
    print(f"wrote {out}: {repro.test_name} (the installed pass {verb} site {args.site} at {result.stage}; "
          f"muls {repro.muls_before} -> {repro.muls_after}); run it with: pytest {out}")
    for note in repro.notes:
        print(f"note: {note}")
    return 0


def _journey(args) -> int:
    result = journey(args.target, site=args.site, variant=args.variant, example_inputs=_example_inputs(args),
                     stage=args.stage, tosa=args.tosa, all_passes=args.all_passes, accelerator=args.accelerator)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.text())
    return 0


def _render(args) -> int:
    out = check_writable(args.out)
    fmt = args.format or {".png": "png", ".dot": "dot", ".gv": "dot"}.get(out.suffix.lower(), "svg")
    result = analyze(args.target, example_inputs=_example_inputs(args), stage=args.stage,
                     rule=args.rule, markers=args.mark, accelerator=args.accelerator)
    kw = {"focus": args.focus, "hops": args.hops}
    graph = result.render_pair(**kw) if args.which == "both" else result.render(args.which, **kw)
    if fmt == "dot":
        data = graph.source.encode("utf-8")
    elif fmt == "svg":
        data = svg(graph).encode("utf-8")
    else:
        data = pipe(graph, fmt)
    write_bytes(out, data)
    print(f"wrote {out} ({fmt}): {result.summary()}")
    return 0


def _explorer(args) -> int:
    explorer.load_model_explorer()  # not installed: say so before exporting anything
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    if args.serve:
        explorer.check_port(args.host, args.port)
    inputs = _example_inputs(args)
    result = analyze(args.target, example_inputs=inputs, stage=args.stage, rule=args.rule, markers=args.mark,
                     accelerator=args.accelerator)
    errors = None
    if args.errors:

        measured = attribution(args.target, variants=[args.errors], steps=args.steps, markers=args.mark,
                               example_inputs=inputs, progress=_ProgressBar())
        errors = measured.variant(args.errors)
    files = result.to_model_explorer(args.out, which=args.which, errors=errors)
    if args.json:
        _print_json(files.to_dict())
    else:
        print(f"wrote {files.folder}: {files.graph.name} ({files.nodes} nodes) and "
              f"{', '.join(p.name for p in files.node_data)}; {result.summary()}")
        if not args.serve:
            print(f"open it with: python -m inspector explorer {args.target} --out {args.out} --serve  "
                  f"(or: {files.command})")
    if args.serve:
        sys.stdout.flush()
        explorer.serve(files.folder, host=args.host, port=args.port,
                       announce=lambda line: print(line, file=sys.stderr if args.json else sys.stdout, flush=True))
    return 0



def _demo(args) -> int:
    check_writable(args.html)
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    name = args.sample or default()
    print(f"sample:{name}: {samples.describe(name)}\n")
    first = analyze("sample:" + name, stage=args.stage, rule="upstream")
    results = [first] + [first.with_rule(p) for p in BUILT_IN if p != "upstream"]
    for r in results:
        print(analysis_text(r), end="\n\n")
    numbers = ""
    if args.numbers:  # the numbers each rule gives, and in words why they are equal when they are
        comparison = first.compare(BUILT_IN, steps=args.steps, progress=_ProgressBar())
        print(comparison_text(comparison), end="\n\n")
        numbers = f"<h2>The quantized numbers of each rule</h2>{comparison_html(comparison)}"
    strict = next(r for r in results if r.rule.name == "state-aware-strict")
    try:
        picture = f"<h2>Before | after under state-aware-strict</h2>{svg(strict.render_pair())}"
    except InspectorError as exc:  # no dot: the tables still make a report
        picture = f"<p><i>{escape(exc)}</i></p>"
    body = "".join(f"<section>{analysis_html(r)}</section><hr>" for r in results) + numbers + picture
    text = page(f"fold inspector: {name}", f"<h1>fold inspector: sample:{escape(name)}</h1>"
                f"<p>{escape(samples.describe(name))}</p>{body}")
    out = write_text(check_writable(args.html), text)
    print(f"wrote {out}")
    return 0


class _SweepBars:
    """One bar per phase of a sweep on one stderr line, with an ETA (only when stderr is a terminal)."""

    def __init__(self) -> None:
        self.bar = _ProgressBar()
        self.last = 0.0

    def __call__(self, bars) -> None:
        if not self.bar.on:
            return
        now = time.monotonic()
        finished = all(b.done >= b.total for b in bars)
        if now - self.last < 0.2 and not finished:
            return
        self.last = now
        parts = []
        for b in bars:
            filled = int(round(12 * max(0.0, min(1.0, b.fraction))))
            eta = "" if b.eta is None or b.done >= b.total else f" ETA {int(b.eta) // 60}:{int(b.eta) % 60:02d}"
            parts.append(f"{b.phase} [{'#' * filled}{'.' * (12 - filled)}] {int(b.done)}/{b.total}{eta}")
        self.bar.stream.write("\r" + " | ".join(parts).ljust(100))
        if finished:
            self.bar.stream.write("\n")
        self.bar.stream.flush()


def _sweep(args) -> int:
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    shapes = None
    if args.input_shape:
        shapes = [tuple(x.shape) for x in _inputs_from_shapes(args.input_shape)]  # one shape for every model
    try:
        result = sweep([*args.targets, *args.models], rules=args.rules, stages=args.stages, compare=args.compare,
                       steps=args.steps,
                       variants=args.variants,
                       workers=args.workers, executor=args.executor, out=args.out, samples=args.samples, exclude=args.exclude,
                       input_shapes=shapes, ray_address=args.ray_address, progress=_SweepBars(), engine=args.engine,
                       confirm=args.confirm, accelerators=args.accelerators, advise_db=args.advise_db)
    except KeyboardInterrupt:

        where = args.out or location()
        kept = f"the results finished so far are kept in {where}; run the same command again to go on" if where \
            else "nothing was kept (the result store is off: give --out DIR to keep results as they finish)"
        print(f"\ninterrupted: {kept}", file=sys.stderr)
        return 130
    text = result.format(args.format)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _accelerator_list(text: str) -> list[str]:
    """--accelerators A,B for a sweep, checked while parsing: each one's canonical name (an unknown one, or a memory
    mode or system config Vela does not take, is one line before any model is loaded)."""
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected accelerators separated by commas, got {_short(text)}")
    return [_accelerator(n) for n in names]


def _int_accelerators(text: str) -> list[str]:
    """--accelerator A,B for a verdict, checked while parsing: each an INT accelerator (one line listing them)."""
    names = [a.strip() for a in text.split(",") if a.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected accelerators separated by commas, got {_short(text)}")
    return [_accelerator(n) for n in names]


def _verdict(args) -> int:
    if args.steps is not None:
        check_steps(args.steps, "--steps")
    out = check_writable(args.out) if args.out else None
    targets = args.targets
    if args.input_shape or args.stream is not None:  # each target with what it is fed: verdict's (target, inputs)
        targets = [(t, inputs_for(t, args.input_shape, args.stream)) for t in args.targets]
    result = verdict(targets, accelerators=args.accelerators, steps=args.steps, quantization=args.quantization,
                     pr_pass_file=args.pr_pass, workers=args.workers, fp=args.fp, progress=_ProgressBar())
    text = result.to_json() if args.json else result.to_markdown()
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        write_text(out, text)
        print(f"wrote {out}: the verdict on {', '.join(n.target for n in result.networks)} "
              f"({', '.join(result.accelerators)}; {len(text):,} characters)", file=sys.stderr)
    return 0


def _samples(args) -> int:
    for name in samples.names():
        print(f"{name:36} {samples.describe(name)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad input, with one ``error:`` line)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's one-line error (see _Parser.error)
        return exc.code if isinstance(exc.code, int) else 2
    except InspectorError as exc:  # a value checked while parsing whose line lists every choice (--accelerator)
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    _quiet_imports()
    handler = {"analyze": _analyze, "advise": _advise, "compare": _compare, "attribute": _attribute, "report": _report,
               "repro": _repro,
               "render": _render, "explorer": _explorer, "demo": _demo, "journey": _journey,
               "samples": _samples, "sweep": _sweep, "verdict": _verdict, "widen": _widen}[args.command]
    try:
        return handler(args)
    except InspectorError as exc:
        _print_error(args, " ".join(str(exc).split()), exc, details=exc.details, carried=exc.attached)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head`: the reader has gone; stop quietly (Python's documented recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:  # noqa: BLE001 - the last line of defence for a CLI user
        line = f"internal error {describe(exc)}" + ("" if args.debug else
                                                    " (rerun with --debug for the traceback, and please report it)")
        _print_error(args, line, exc, details=_traceback(exc))
        return 1


def _traceback(exc: BaseException) -> str:
    """``exc``'s whole traceback, with every exception chained below it."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _print_error(args, line: str, exc: BaseException, *, details: str, carried: str = "") -> None:
    """An error as the command line shows it: one ``error:`` line on stderr. Under ``--debug`` the whole
    traceback comes first, oldest first as Python prints a chain: ``carried`` (what the error brought as text: the
    traceback of a variant's failure, a worker process's, what the backend printed), then the error's own traceback
    with every cause chained in this process. With ``--json`` (or ``--format json``) stdout also gets one JSON
    document, ``{"error": line, "details": details}``, so a script reading it keeps the traceback."""
    if args.debug:
        if carried.strip():
            print(f"--- what the error carried (the traceback of its cause, what the backend printed):\n"
                  f"{carried.rstrip()}\n--- the error itself:", file=sys.stderr)
        print(_traceback(exc).rstrip("\n"), file=sys.stderr)
    if getattr(args, "json", False) or getattr(args, "format", None) == "json":
        _print_json({"error": line, "details": details})
    print(f"error: {line}", file=sys.stderr)

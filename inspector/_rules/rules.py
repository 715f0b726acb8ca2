"""Fold rules (``Rule``), their one registry, and the installed pass wrapped to apply one.

A rule is a small frozen object: a name, a help line, where it comes from, whether it folds at
all and its state guard. Every rule runs as a subclass of the REAL installed
``FoldScalarMulIntoConvPass``; the fold itself is always the installed code. A wrapper only
(a) refuses to run at all (``off``), or (b) hides guarded muls from the pass's matcher (a state
guard such as the one executorch PR #21234 proposes: an open pull request, in no release), and
(c) records which muls the pass really folded.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from dataclasses import replace as _replace
import hashlib
import inspect
import re
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any
from collections.abc import Callable, Iterable

from torch.fx import GraphModule, Node

from .._base import codec as _codec
from .._base.data import read_str as _read_str
from .._base.registry import Registry
from .._doors import executorch as _executorch
from .._sites import graph as _graph
from .fold_runs import FoldLog, FoldRun, resolve_markers, start_run, unknown_marker
from .._base.errors import FoldPassCrash, InspectorError, crash_behind, describe, listing, quoted
from .._targets.load import import_file
from .._sites.scale import scale_summary
from .._base.hashing import digest
import warnings

@dataclass(frozen=True, kw_only=True)
class StateGuard:
    """A structural state guard: a mul is hidden from the pass when it reaches a state boundary."""

    in_place_writes: bool = False  # also count in-place writes into a buffer or input (copy_ at tfa)
    top_level_markers: bool = False  # a marker counts only in the top-level meta key (as PR #21234 reads it)

    def reach(self, graph, signature, also_marked: Iterable[Node] = (), memo=None) -> _graph.StateReach:
        """Which nodes of ``graph`` reach which state boundary, as this guard reads them (``memo``: the
        ``_graph.ReachMemo`` of a graph that is never modified)."""
        return _graph.state_reach(graph, signature, in_place_writes=self.in_place_writes, also_marked=also_marked,
                                  top_level_markers=self.top_level_markers, memo=memo)


@dataclass(frozen=True, kw_only=True)
class Skip:
    """A user's guard keeping a site from the pass: a reason code (shown as ``rule:CODE``) and why."""

    # a user's rule writes Skip("wide-scale", "why") (README, docs/rules.md): these two stay positional
    code: str = field(kw_only=False)  # a short slug: lowercase letters, digits and dashes ("wide-scale")
    detail: str = field(default="", kw_only=False)  # what about this site made the rule skip it

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not _SLUG.fullmatch(self.code):
            raise InspectorError(f"a Skip code is a short slug of lowercase letters, digits and dashes, "
                                 f"got {quoted(self.code)}")
        if not isinstance(self.detail, str):
            raise InspectorError(f"a Skip detail is a string, got a {type(self.detail).__name__}")


_SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")


@dataclass(frozen=True, kw_only=True)
class RuleContext:
    """What a user's guard is told about one site, before the pass runs (read-only)."""

    site: str  # the site id (stable across stages)
    stage: str  # aten | tfa | edge, or "lowering" inside a comparison's flow
    mul: Node  # the mul node (read it; never change the graph)
    conv: Node  # the convolution feeding it
    conv_op: str  # e.g. "aten.conv2d.default"
    scale: Any  # the ScaleSummary of what multiplies the conv output
    has_signature: bool  # the pass runs with an exported program (aten, edge, lowering), not at tfa
    reaches: Mapping[str, tuple[str, ...]]  # boundary kind -> node names from the mul to the boundary it reaches
    marked: bool  # the mul carries the carried-state marker
    reaches_output: bool  # the mul output reaches the graph's output (a crude "it may be fed back")

    @property
    def reaches_state(self) -> bool:
        """The mul output reaches any state boundary (a buffer or input write, or a marker)."""
        return bool(self.reaches)


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One fold rule: what decides whether the installed pass may fold a site.

    A built-in rule or a guard of the user's keeps the installed pass's own code doing every fold;
    it can only keep the pass from running (``folds=False``) or hide muls from its matcher (a
    ``guard``, a user's ``check``). A rule made from a whole pass class (``Rule.from_pass``)
    runs that class where the installed one would run. All are registered the same way
    (``register``), and nothing else in the inspector branches on a rule's name.
    """
    # Positional, the rest by keyword: a plugin written before records went keyword-only builds
    # ``Rule(name, help, source, check=...)``, and keeps working.
    name: str = field(kw_only=False)  # what users type: --rule NAME, analyze(rule=NAME), a variant's label
    help: str = field(kw_only=False)  # one line: what the rule does
    source: str = field(kw_only=False)  # where it comes from (the installed pass, an open upstream PR, a file)
    folds: bool = True  # False: the pass never runs, nothing folds
    guard: StateGuard | None = None  # muls reaching a state boundary are hidden from the pass (None: no guard)
    check: Callable[[RuleContext], Skip | None] | None = field(default=None, compare=False)  # a user's guard
    pass_class: type | None = field(default=None, compare=False)  # a whole pass run instead of the installed one
    origin: str = ""  # "path/to/file.py:NAME" for a rule loaded from a file ("" otherwise)

    @property
    def guarded(self) -> bool:
        return self.folds and self.guard is not None

    @property
    def is_users(self) -> bool:
        """A rule of the user's (a guard function or a pass class): code that runs in this process."""
        return self.check is not None or self.pass_class is not None

    @property
    def identity(self) -> tuple:
        """What results computed under this rule depend on: its name for a built-in rule; for a
        user's, its name, file and the source of its guard or pass class (an edited rule is another)."""
        if not self.is_users:
            return (self.name,)

        code = self.check if self.check is not None else self.pass_class
        try:
            source = inspect.getsource(code)
        except (OSError, TypeError):  # defined where no source is kept: this object only
            source = f"<no source: id {id(code)}>"
        return (self.name, self.origin, hashlib.sha256(source.encode()).hexdigest()[:16])

    def reach(self, graph, signature, also_marked: Iterable[Node] = (), memo=None) -> _graph.StateReach:
        """What this rule's guard reads on ``graph`` (nothing for a rule without a guard)."""
        if not self.guarded:
            return _graph.StateReach(next_hop={})
        return self.guard.reach(graph, signature, also_marked, memo=memo)

    # Written by hand: a rule's check and pass class are code, written by their qualified names; a rule is read
    # back by name through the registry (codec.register), never from this dict.
    def to_dict(self) -> dict:
        return {"name": self.name, "help": self.help, "source": self.source, "folds": self.folds,
                "guard": None if self.guard is None else {"in_place_writes": self.guard.in_place_writes,
                                                          "top_level_markers": self.guard.top_level_markers},
                "check": _qualname(self.check), "pass_class": _qualname(self.pass_class), "origin": self.origin}

    def __str__(self) -> str:
        return self.name

    def __hash__(self) -> int:
        return hash((self.name, self.source, id(self.check), id(self.pass_class)))

    def __eq__(self, other) -> bool:
        return (isinstance(other, Rule) and (self.name, self.help, self.source, self.folds, self.guard, self.origin)
                == (other.name, other.help, other.source, other.folds, other.guard, other.origin)
                and self.check is other.check and self.pass_class is other.pass_class)

    # A rule travels to a worker as what rebuilds it there (its name, file and identity), never as its code:
    # the worker finds the same rule registered, or loads it again from its file (``travelled``).
    def __reduce__(self):
        return travelled, (self.name, self.origin, rule_identity(self))

    def __copy__(self) -> Rule:
        return self  # frozen, and its guard or pass class is the user's own object

    def __deepcopy__(self, memo) -> Rule:
        return self

    @property
    def stand_in(self) -> bool:
        """A rule read from a file by name only (a saved result of a rule this process does not know)."""
        return self.source == _STAND_IN

    @classmethod
    def from_pass(cls, pass_class: type, *, name: str | None = None, help: str | None = None,
                  source: str | None = None, register_it: bool = True) -> Rule:
        """A rule that runs ``pass_class`` (with the installed pass's constructor:
        ``pass_class(exported_program)`` / ``pass_class(tfa_pass=True)``) wherever the installed
        pass would run, at every stage and in a comparison's quantize -> lower flow."""
        if not isinstance(pass_class, type) or not callable(getattr(pass_class, "call", None)):
            raise InspectorError(f"a pass rule needs a pass class with a call(graph_module) method, "
                                 f"got {quoted(pass_class)}")
        name = name or pass_class.__name__
        rule = cls(name=name, help=help or f"the pass class {pass_class.__qualname__} instead of the installed pass",
                   source=source or f"the user's pass class {pass_class.__module__}.{pass_class.__qualname__}",
                   pass_class=pass_class)
        return register(rule, replace=True) if register_it else rule


def rule(name: str, *, help: str = "", base: str | Rule = "upstream", source: str | None = None):
    """Decorate a guard ``fn(site: RuleContext) -> None | Skip(code, detail)`` into the registered rule ``name``.

    The rule is ``base`` with ``fn`` hiding the sites it skips from the installed pass's matcher; it is
    registered, so every entry point (the CLI, the widget, ``compare``, sessions) offers it.

    Args:
        name: the rule's name, one word (what ``--rule`` and ``compare(variants=...)`` take).
        help: its one-line help; default: the guard's docstring's first line.
        base: the rule it narrows (a name or a ``Rule``); default ``upstream``, the installed pass as it is.
        source: where it comes from, in words; default: the guard's module and name.
    """
    def make(fn):
        if not callable(fn):
            raise InspectorError(f"inspector.rule decorates a function of a RuleContext, got {quoted(fn)}")
        parent = get_rule(base)
        if parent.is_users:
            raise InspectorError(f"a guard's base is a built-in rule, not the user's rule {quoted(parent.name)}")
        where = source or f"the user's guard {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
        return register(Rule(name=name,
                             help=help or (fn.__doc__ or "").strip().split("\n")[0] or f"{parent.name} and {name}",
                               source=where, folds=parent.folds, guard=parent.guard, check=fn), replace=True)

    return make


def _qualname(obj) -> str | None:
    return None if obj is None else f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


ENTRY_POINT_GROUP = "fold_inspector.rules"  # plugins: a callable that receives ``register``, or a Rule


def _discover(registry) -> None:
    """Register the rules plugins offer through the ``fold_inspector.rules`` entry points (once)."""

    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
            if isinstance(loaded, Rule):
                register(loaded, replace=True)
            else:
                loaded(register)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take every rule with it

            warnings.warn(f"the fold-rule plugin {point.name} ({point.value}) failed to load: {describe(exc)}",
                          stacklevel=2)


def _checked(rule: Rule) -> Rule:
    if not isinstance(rule, Rule):
        raise InspectorError(f"a rule is an inspector.Rule, got a {type(rule).__name__}")
    if not rule.name or not isinstance(rule.name, str) or any(ch in rule.name for ch in ",@ \n"):
        raise InspectorError(f"a rule's name is one word without ',', '@' or spaces, got {quoted(rule.name)}")
    return rule


def _from_file(name: str) -> Rule | None:
    return load_rule(name) if ".py:" in name else None


# The one registry of rules, by name: every entry point (CLI, widget, compare, sessions) offers what it holds.
rules = Registry("rule", make=_checked, line=lambda r: f"{r.help} [{r.source}]", discover=_discover,
                 missing=_from_file, hint="or give path/to/rules.py:NAME")


def register(rule: Rule, *, replace: bool = False) -> Rule:
    """Add ``rule`` to the rules every entry point offers (CLI, widget, compare, sessions)."""
    return rules.register(rule, replace=replace)


_INSTALLED = f"the installed pass (executorch {_executorch.installed_version()})"  # the release this process runs
OFF = register(Rule(name="off", help="never fold", source="this project: the fold turned off, for comparison",
                    folds=False))
UPSTREAM = register(Rule(name="upstream", help="the installed pass as it is", source=_INSTALLED))
STATE_AWARE = register(Rule(
    name="state-aware",
    help="upstream, but skip muls that reach a BUFFER_MUTATION / USER_INPUT_MUTATION output of the graph signature "
    "or a node marked carried_quant_state",
    source="executorch PR #21234 as proposed (an open pull request, in no release)",
    guard=StateGuard(top_level_markers=True)))
STATE_AWARE_STRICT = register(Rule(
    name="state-aware-strict",
    help="state-aware, and also treat in-place writes into a buffer or an input (copy_ into a get_attr buffer, "
    "as at tfa) as state boundaries",
    source="this project's proposal", guard=StateGuard(in_place_writes=True)))
# The rules this project ships (what `demo` shows; a process may register more, users' and plugins').
BUILT_IN = (OFF.name, UPSTREAM.name, STATE_AWARE.name, STATE_AWARE_STRICT.name)
# What compare runs when not told: never fold, the installed pass, and the guard that sees state at tfa.
DEFAULT_VARIANTS = (OFF.name, UPSTREAM.name, STATE_AWARE_STRICT.name)


def get_rule(rule: str | Rule) -> Rule:
    """The registered rule ``rule`` names (a Rule is returned as it is, registered or not);
    ``"path/to/rules.py:NAME"`` imports that file (code the user chose to run) and registers NAME."""
    return rule if isinstance(rule, Rule) else rules.get(rule)


def load_rule(spec: str) -> Rule:
    """``path/to/file.py:NAME``: import the file and register what NAME is: a rule made with
    ``@inspector.rule``, a guard function of a ``RuleContext``, or a pass class with the installed
    pass's constructor (``Rule.from_pass``). The rule keeps its file as ``origin``."""

    file, _, attr = spec.rpartition(":")
    if not file.endswith(".py") or not attr.isidentifier():
        raise InspectorError(f"a rule file is given as path/to/file.py:NAME, got {quoted(spec)}")
    module = import_file(file)
    obj = getattr(module, attr, None)
    origin = f"{Path(file).resolve()}:{attr}"
    shown = f"{Path(file).name}:{attr}"
    if isinstance(obj, Rule):
        rule = obj
    elif isinstance(obj, type):
        rule = Rule.from_pass(obj, name=attr, source=f"the user's pass class {shown}", register_it=False)
    elif callable(obj):
        doc = (getattr(obj, "__doc__", None) or "").strip().split("\n")[0]
        rule = Rule(name=attr, help=doc or f"upstream, and the guard {attr}", source=f"the user's guard {shown}",
                      guard=UPSTREAM.guard, check=obj)
    else:
        found = sorted(n for n, v in vars(module).items() if isinstance(v, Rule) or
                       (callable(v) and getattr(v, "__module__", None) == module.__name__))
        raise InspectorError(f"{Path(file).name} has no rule, guard function or pass class {quoted(attr)}; "
                             f"found: {listing(found) or 'none'}")

    return register(_replace(rule, origin=origin), replace=True)


def check_rule(rule: str | Rule) -> str:
    """The name of the rule ``rule`` (raises one line if it names none)."""
    return get_rule(rule).name


def marker_tuple(markers) -> tuple[str, ...]:
    """Markers as a tuple of strings: one string is one marker, not its characters."""
    if markers is None:
        return ()
    if isinstance(markers, str):
        return (markers,)
    try:
        out = tuple(markers)
    except TypeError:
        raise InspectorError(f"markers must be site ids or node names, got {quoted(markers)}") from None
    bad = [m for m in out if not isinstance(m, str)]
    if bad:
        raise InspectorError(f"a marker is a site id or node name (a string), got {quoted(bad[0])}")
    return out


# How long a user's guard may take on one site before it is called too slow (it runs once per site
# for every decide: a toggle re-decides every site under a user's rule).
GUARD_SECONDS = 1.0


def rule_skips(rule: Rule, graph, program, stage: str, cands, ids, reach: _graph.StateReach,
               marked: Iterable[Node] = ()) -> dict[str, tuple[str, Skip]]:
    """mul name -> (site id, Skip) for every site the user's guard of ``rule`` keeps from the pass.

    ``reach``: which nodes reach which state boundary (every kind, markers included). The guard
    gets a read-only ``RuleContext`` per site; one that raises, returns something else than None
    or a ``Skip``, or takes longer than ``GUARD_SECONDS`` on a site is one line naming the rule."""
    if rule.check is None:
        return {}

    marked = set(marked)
    to_output = _graph.reaches_output(graph)
    out: dict[str, tuple[str, Skip]] = {}
    for c, site_id in zip(cands, ids):
        reaches = {k: tuple(n.name for n in reach.path(k, c.mul)) for k in reach.kinds(c.mul)}
        context = RuleContext(site=site_id, stage=stage, mul=c.mul, conv=c.conv, conv_op=_graph.op_name(c.conv),
                              scale=scale_summary(c, program),
                              has_signature=program is not None, reaches=MappingProxyType(reaches),
                              marked=c.mul in marked or _graph.marked(c.mul), reaches_output=c.mul in to_output)
        t0 = time.perf_counter()
        try:
            answer = rule.check(context)
        except InspectorError as exc:
            raise InspectorError(f"rule {quoted(rule.name)} failed on site {site_id}: {exc}") from exc
        except Exception as exc:  # the user's guard raised: one line naming it
            raise InspectorError(f"rule {quoted(rule.name)} raised on site {site_id}: {describe(exc)}; "
                                 "fix the guard (it must return None or inspector.Skip(code, detail))") from exc
        took = time.perf_counter() - t0
        if took > GUARD_SECONDS:
            raise InspectorError(f"rule {quoted(rule.name)} took {took:.1f} s on site {site_id} (the limit is "
                                 f"{GUARD_SECONDS:g} s a site: it runs for every site on every decide); make it cheaper")
        if answer is None:
            continue
        if not isinstance(answer, Skip):
            raise InspectorError(f"rule {quoted(rule.name)} returned a {type(answer).__name__} for site {site_id}; "
                                 "a guard returns None (the installed pass decides) or inspector.Skip(code, detail)")
        out[c.mul.name] = (site_id, answer)
    return out


def rule_pass_class(rule: str | Rule, markers: Iterable[str] = (), log: FoldLog | None = None,
                      hidden: frozenset[str] | None = None, site_ids: dict[str, str] | None = None) -> type:
    """A subclass of the installed pass that applies ``rule`` and ``markers`` and reports to ``log``.

    Markers (site ids or node names) are set on the graph the pass receives, in
    ``meta["carried_quant_state"]`` and ``meta["custom"]``, before the guard reads them.
    ``hidden`` names the muls the guard hides instead, when the caller computed the guard on a
    larger graph than the one the pass receives (a region, see ``_decide/region.py``); ``site_ids`` (mul name
    -> site id) when the caller found the sites already (the call does not look for them again).
    The subclass is made by the door (``_executorch.fold_pass_subclass``): the fold itself
    is always the installed code.
    """
    rule = get_rule(rule)
    markers = tuple(markers)
    if rule.pass_class is not None:
        from .user_pass import user_pass_class  # cycle: user_pass builds on this module

        return user_pass_class(rule, markers, log)
    return _executorch.fold_pass_subclass(
        rule.name, lambda gm, program: _RuleCall(rule, markers, log, gm, program, hidden, site_ids))


class _RuleCall:
    """One call of a rule's pass: marks the graph, hides guarded muls, records what folded."""

    def __init__(self, rule: Rule, markers: tuple[str, ...], log: FoldLog | None, graph_module: GraphModule,
                 program, hidden: frozenset[str] | None = None, site_ids: dict[str, str] | None = None) -> None:
        graph = graph_module.graph
        run = start_run(graph_module, program, markers, log, site_ids)
        self.run, self.log = run, log
        self.skip = not rule.folds
        if hidden is None:
            self.guarded = guarded_muls(rule, graph, program)
            if rule.check is not None:  # a user's guard, read on the graph as the pass receives it
                cands = _graph.candidates(graph)
                reach = _graph.state_reach(graph, program.graph_signature if program is not None else None,
                                           in_place_writes=True)
                stage = "tfa" if program is None else "lowering"
                by_name = {n.name: n for n in graph.nodes}
                for name in rule_skips(rule, graph, program, stage, cands, _graph.site_ids(cands), reach):
                    self.guarded.setdefault(by_name[name], ["rule"])
        else:
            self.guarded = {n: [] for n in graph.nodes if n.name in hidden}

    def hides(self, mul: Node) -> bool:
        return mul in self.guarded

    def folded(self, conv: Node, mul_name: str) -> None:
        self.run.folded.append(mul_name)
        self.run.folded_ids.append(self.run.site_ids.get(mul_name, mul_name))

    def crashed(self, conv: Node, mul_name: str, exc: Exception) -> Exception:
        site_id = self.run.site_ids.get(mul_name, mul_name)
        return FoldPassCrash(
            f"the installed {_executorch.FOLD_PASS} crashed while folding site {site_id} ({mul_name} after "
            f"{conv.name}): {describe(exc)}",
            site_id, mul_name,
        )

    def finished(self) -> None:
        if self.log is not None:
            self.log.add(self.run)


def guard_reach(rule: str | Rule, graph, signature, also_marked: Iterable[Node] = ()) -> _graph.StateReach:
    """What ``rule``'s state guard reads on ``graph``: which nodes reach which state boundary
    (nothing for the rules without a guard)."""
    return get_rule(rule).reach(graph, signature, also_marked)


def guarded_muls(rule: str | Rule, graph, program) -> dict[Node, list[str]]:
    """Muls the state guard hides from the pass, with the boundary kinds each one reaches."""
    reach = guard_reach(rule, graph, program.graph_signature if program is not None else None)
    return {n: list(reach.kinds(n)) for n in graph.nodes if _graph.is_mul(n) and reach.kinds(n)}


def run_pass(graph_module: GraphModule, program, rule: str | Rule, markers: tuple[str, ...] = (),
             stage: str = "", hidden: frozenset[str] | None = None,
             site_ids: dict[str, str] | None = None) -> FoldRun:
    """Run ``rule``'s pass on ``graph_module`` (rewritten in place: give it a private copy);
    ``hidden``: the muls the guard hides, by name, instead of the guard's own reading of this graph;
    ``site_ids``: mul name -> site id, when the caller found the sites already."""
    log = FoldLog()
    pass_class = rule_pass_class(rule, markers, log, hidden, site_ids)
    fold_pass = pass_class(program) if program is not None else pass_class(tfa_pass=True)
    try:
        with _executorch.fast_signature_lookups(program):
            fold_pass(graph_module)
    except InspectorError:
        raise  # already one line: a crash on a site, or a user's rule failing
    except Exception as exc:  # the installed pass raised: say where, in one line
        crash = crash_behind(exc)
        if crash is not None:
            raise crash from crash.__cause__  # the pass's own error stays chained, not its wrapper
        where = f" at stage {stage}" if stage else ""
        raise InspectorError(f"the installed fold pass raised{where}: {describe(exc)}") from exc
    return log.runs[-1]


def folded_site_ids(stage_graph, rule: str | Rule, markers: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ids of the sites ``rule``'s pass folds on ``stage_graph`` (a private copy is rewritten)."""
    gm, program = stage_graph.fresh_copy()
    _, unknown = resolve_markers(gm.graph, markers)
    if unknown:
        raise unknown_marker(unknown[0], stage_graph.stage, _graph.site_ids(_graph.candidates(gm.graph)))
    return tuple(run_pass(gm, program, rule, markers, stage_graph.stage).folded_ids)


# ---------------------------------------------------------------- rules in worker processes and files


def rule_identity(rule: str | Rule) -> str:
    """A rule's identity in a few characters (a user's rule: by its source)."""

    return digest(get_rule(rule).identity)[:20]


def travelled(name: str, origin: str, identity: str) -> Rule:
    """The rule a parent process sent (``Rule.__reduce__``), as this process knows it: the one registered
    under ``name`` when it is the same, else loaded again from its file (one line if it cannot be)."""
    try:
        if rule_identity(name) == identity:
            return get_rule(name)
    except InspectorError:
        pass
    if not origin:
        raise InspectorError(f"rule {name!r} is not known in this worker process; define it in a file and "
                             "name it path/to/rules.py:NAME")
    loaded = load_rule(origin)
    if rule_identity(loaded) != identity:
        raise InspectorError(f"rule {name!r} in {origin} changed while the work ran; run it again")
    return loaded


_STAND_IN = "a file that names it (this process does not know the rule)"


def rule_named(name: str) -> Rule:
    """The rule a file names (a saved comparison, session or sweep): the registered one, or, for a name this
    process does not know, a stand-in that says so (it reads and shows; it cannot run)."""
    if name in rules:
        return rules.get(name)
    return Rule(name=name, help="a rule this process does not know", source=_STAND_IN)


# a record's rule is written by its name, and read back as the registered one (or a stand-in)
_codec.register(Rule, write=lambda r: r.name, read=lambda v: rule_named(_read_str(v)))

"""A verdict drawn: its answer in sentences, text, HTML, and the Markdown reply a reviewer pastes into the PR.

Every sentence is built from the verdict's numbers here, and says only what they show: a claim whose numbers do
not hold is not written (its opposite is). Cycles are Vela's estimates for the compiler settings named under the
table; dB and errors are the TOSA reference model's; figures a pull request published are set beside ours, named
as another engine's.
"""

from __future__ import annotations

from dataclasses import replace

from .._advise.marker_reach import CUSTOM_PROGRAM, TOP_PROGRAM
from .._advise.verdict_records import (MARKER, MARKER_ON_PROGRAM, STRICT, STRUCTURAL, UPSTREAM, Figures, Flow,
                                       Network, Verdict)
from .._base.formats import GITHUB_COMMENT_LIMIT, MISSING, cycles, cycles_change, db, db_change
from .._cost.records import ESTIMATE
from .._numbers.measures import metrics
from .markup import escape, markdown_table, md_code
from .report import Redactor
from .tables import html_table, text_table

PR = "#21234"
HAZARD = "#21152"
# The decision columns, in words a PR reader knows (the installed pass is named by its version in ``titles``).
TITLES = {UPSTREAM: "installed pass", STRUCTURAL: f"{PR}'s structural check, no marker (re-implemented here)",
          MARKER: "marker on the graph the pass receives", MARKER_ON_PROGRAM: "marker in the exported program's node.meta",
          STRICT: "this project's stricter guard (in-place writes too)"}
FOLDED_BEFORE = "folded before calibration"  # in the quantizer's rewrite (transform-for-annotation)
FOLDED_LOWERING = "folded in to_edge_transform_and_lower"


# ---------------------------------------------------------------- small words


def _of(n: int, total: int) -> str:
    return f"{n} of {total}"


def _sites(n: int) -> str:
    return f"{n} site" + ("" if n == 1 else "s")


def _names(items) -> str:
    items = list(dict.fromkeys(items))
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _short(target: str) -> str:
    return target.removeprefix("sample:")


def _pct(change, base) -> str:
    if change is None or not base:
        return MISSING
    return f"{change / base:+.1%}"


def _version(v: Verdict, name: str) -> str:
    return dict(v.versions).get(name, "?")


def _task_value(name: str, value) -> str:
    m = metrics.by_key(name)
    return MISSING if value is None else m.format(value) if m is not None else f"{value:.4g}"


def _frames(share_value, steps: int) -> int | None:
    return None if share_value is None else round(share_value * steps)


# ---------------------------------------------------------------- what the numbers say, per flow


def _int_flows(v: Verdict) -> list[tuple[Network, Flow]]:
    return [(n, f) for n in v.networks for f in n.flows if f.name == "INT" and f.error is None]


def _fp_flows(v: Verdict) -> list[tuple[Network, Flow]]:
    return [(n, f) for n in v.networks for f in n.flows if f.name == "FP" and f.error is None]


def _stopped(flows, key: str) -> tuple[int, int]:
    """(sites feeding state the decision ``key`` kept from folding in every one of ``flows`` that measured it, sites
    feeding state of the networks it was measured on): each (network, site) counted once, however many accelerators."""
    seen: dict[tuple[str, str], bool] = {}
    for n, f in flows:
        d = f.decision(key)
        if d is None or not n.state_sites:
            continue
        for s in n.state_sites:
            seen[(n.target, s)] = seen.get((n.target, s), True) and s not in d.folded
    return sum(seen.values()), len(seen)


def _same_as_upstream(flows, key: str) -> bool:
    return all(set(f.decision(key).folded) == set(f.decision(UPSTREAM).folded)
               for _, f in flows if f.decision(key) is not None and f.decision(UPSTREAM) is not None)


def _observed_folded(v: Verdict) -> list:
    """Every folded site the INT flows' observers were read at: (network, accelerator, ObservedSite)."""
    return [(n, a, o) for n in v.networks for a in n.accelerators for o in a.observed if o.folded]


# PR #21234's own tests of the guard (read at its head): both build their graph with ``to_edge`` and hand the pass
# that top-level edge program, as the installed unit test does.
PR_TESTS = ("test_does_not_fold_when_output_feeds_stateful_buffer", "test_does_not_fold_when_output_marked_carried_state")
WORDS = ("Words: a *site* is a convolution whose output is multiplied by a constant, what the pass folds; the "
         "*quantizer's rewrite* is ExecuTorch's transform-for-annotation, the passes prepare_pt2e runs on the graph "
         "before it inserts observers (so before calibration).")


def _pointer(v: Verdict, needle: str) -> str:
    """``file:line`` of the installed pass manager's construction of the fold pass whose code has ``needle``."""
    found = next(((f, n) for f, n, code in v.pointers if needle in code), None)
    return f"{found[0]}:{found[1]}" if found else "arm_pass_manager.py"


def lead(v: Verdict, quote=None) -> list[str]:
    """The reply's first sentences, for a reviewer of the PR: what the structural check does in this executorch and
    why (with code pointers), what the marker does in each flow, what skipping costs (mean and worst), and what would
    have to change for #21152's mechanism to arise. Each sentence is built from the numbers and says only what they
    show."""
    quote = quote or _short
    ints, fps = _int_flows(v), _fp_flows(v)
    out = [_lead_structural(v, ints, fps), _lead_marker(v, ints, fps), *_lead_costs(v, quote), _lead_hazard(v, ints)]
    return [x for x in out if x]


def scope(v: Verdict, quote=None) -> str:
    """What was measured, said once: the networks with a site, how many had none, the quantization, accelerators
    and executorch."""
    quote = quote or _short
    with_site = [n for n in v.networks if n.sites]
    none = len(v.networks) - len(with_site)
    steps = sorted({n.steps for n in with_site})
    text = (f"Measured on {len(with_site)} network(s) with a site ({', '.join(quote(n.target) for n in with_site)}"
            + (f"; {none} of the {len(v.networks)} given had none, so nothing to decide" if none else "")
            + f"), {v.quantization}, over {_span(steps, str)} step(s), on {_names(v.accelerators)} and the FP flow "
            f"(TOSA-1.0+FP), executorch {_version(v, 'executorch')}: the installed pass, not main and not the PR's "
            "branch.")
    if v.guard:
        text += f" The structural-check and marker columns ran {v.guard}."
    has_fp = any(f.name == "FP" for n in with_site for f in n.flows)
    return text if has_fp else text.replace(" and the FP flow (TOSA-1.0+FP)", "")


def _lead_structural(v: Verdict, ints, fps) -> str:
    both = ints + fps
    if not both:
        return ""
    if not _same_as_upstream(both, STRUCTURAL):
        kept, total = _stopped(both, STRUCTURAL)
        return f"{PR}'s structural check kept {_of(kept, total)} site(s) feeding state from folding."
    return (f"In executorch {_version(v, 'executorch')} {PR}'s structural check cannot fire, and on these networks it "
            f"changed no decision: the pass manager builds the pass for the quantizer's rewrite with no exported "
            f"program (`{_pointer(v, 'tfa_pass=True')}`), so there is no graph signature to read, and inside "
            f"to_edge_transform_and_lower (`{_pointer(v, 'exported_program')}`) it receives the TOSA delegate's own "
            "program, where the state is a plain input and output, never a BUFFER_MUTATION.")


def _lead_marker(v: Verdict, ints, fps) -> str:
    if not any(n.state_sites for n in v.networks):
        return ""
    (k_int, t_int), (kp_int, tp_int) = _stopped(ints, MARKER), _stopped(ints, MARKER_ON_PROGRAM)
    (kp_fp, tp_fp) = _stopped(fps, MARKER_ON_PROGRAM)
    whole = "So the marker is the PR's whole effect. " if _same_as_upstream(ints + fps, STRUCTURAL) else ""
    parts = []
    if t_int:
        parts.append(f"in the INT flow it only prevents a fold that happens before calibration ({_of(k_int, t_int)} "
                     "site(s) feeding state kept), so the observers then see the unfolded conv and its mul")
    if tp_int or tp_fp:
        reach = []
        if tp_int:
            reach.append(f"reaches the quantizer's rewrite ({_of(kp_int, tp_int)} kept)" if kp_int
                         else "does not reach the quantizer's rewrite")
        if tp_fp:
            reach.append(f"reaches the FP flow's lowering call ({_of(kp_fp, tp_fp)} kept)" if kp_fp
                         else f"does not reach the FP flow's lowering call ({_of(kp_fp, tp_fp)} kept): to_edge drops "
                              "a top-level node.meta key")
        parts.append("set where a model author sets it, in the exported program's top-level node.meta, it "
                     + " but ".join(reach) if len(reach) == 2 and bool(kp_int) != bool(kp_fp)
                     else "set where a model author sets it, in the exported program's top-level node.meta, it "
                     + " and ".join(reach))
    custom = [r for r in v.marker_reach if r.placement == CUSTOM_PROGRAM and r.error is None]
    top = [r for r in v.marker_reach if r.placement == TOP_PROGRAM and r.error is None]
    if custom and all(r.reached for r in custom) and not all(r.reached for r in top):
        parts.append('set in node.meta["custom"] instead, it reaches every fold call of both flows, so that is where '
                     "the PR should read it")
    if not parts:
        return ""
    text = "; ".join(parts)
    return whole + text[0].upper() + text[1:] + "."


def _lead_costs(v: Verdict, quote) -> list[str]:
    """Per network with sites feeding state: what skipping them cost, mean and worst, per accelerator (the numbers
    said once where every accelerator measured the same)."""
    out = []
    for n in v.networks:
        if not n.state_sites:
            continue
        cost, numbers = [], {}
        for a in n.accelerators:
            up, sk = a.upstream, a.skipped
            if sk is None or sk.error is not None or up.error is not None:
                continue
            extra = _change(sk.cycles, up.cycles)
            cost.append(f"{cycles_change(extra)} cycles on {a.accelerator}" if extra is not None
                        else f"no cycles on {a.accelerator}")
            numbers.setdefault(_skipped_numbers(up, sk), []).append(a.accelerator)
        if not cost:
            continue
        if len(numbers) == 1:
            said = next(iter(numbers)) + (" on every accelerator" if len(cost) > 1 else "")
        else:
            said = "; ".join(f"on {_names(chips)}: {text}" for text, chips in numbers.items())
        out.append(f"Skipping the {_sites(len(n.state_sites))} feeding state of {quote(n.target)} (the marker on "
                   f"each), over {n.steps} step(s), costs {_names(cost)}; {said}.")
    return out


def _skipped_numbers(up: Figures, sk: Figures) -> str:
    """What skipping did to the numbers: mean and worst SQNR, mean |error|, the steps each way, the task."""
    task = [f"{name} {_task_value(name, up.value(name))} -> {_task_value(name, sk.value(name))}"
            for name, _ in up.task if up.value(name) is not None or sk.value(name) is not None]
    if up.step_db == sk.step_db and up.mean_abs == sk.mean_abs:
        return ", ".join([f"the same SQNR at every step ({db(up.mean_db)} dB on average, {db(up.worst_db)} at "
                          "worst) and the same mean |error|", *task])
    better = sum(1 for u, s in zip(up.step_db, sk.step_db) if u is not None and s is not None and u > s)
    worse = sum(1 for u, s in zip(up.step_db, sk.step_db) if u is not None and s is not None and u < s)
    words = [f"mean SQNR {db(up.mean_db)} -> {db(sk.mean_db)} dB", f"worst {db(up.worst_db)} -> {db(sk.worst_db)} dB",
             f"mean |error| {_err(up.mean_abs)} -> {_err(sk.mean_abs)} "
             f"({_pct(_change(sk.mean_abs, up.mean_abs), up.mean_abs)})"]
    if len(up.step_db) > 1:
        words.append(f"folding better at {better} and worse at {worse} of {len(up.step_db)} steps")
    return ", ".join(words + task)


def _err(value) -> str:
    return MISSING if value is None else f"{value:.3g}"


def _lead_hazard(v: Verdict, ints) -> str:
    """What would have to change for #21152's mechanism to arise, and what it does when built on purpose."""
    if not ints or any(f.folds.get("lowering", 0) for _, f in ints):
        return ""
    stale = [a for n in v.networks for a in n.accelerators if a.stale is not None and a.stale.error is None]
    built = ""
    if stale:
        changes = [_change(a.stale.worst_db, a.upstream.worst_db) for a in stale]
        changes = [c for c in changes if c is not None]
        if changes:
            built = (" Built here on purpose (not a flow ExecuTorch runs), such a fold moves the worst SQNR by "
                     f"{_span(changes, db_change)} dB.")
    return (f"{HAZARD}'s mechanism, qparams calibrated before a fold and left stale by it, needs a fold after "
            f"calibration, which no flow of executorch {_version(v, 'executorch')} makes: the INT flow folds before "
            "the observers exist and its lowering call receives the mul already quantized, and the FP flow calibrates "
            f"nothing; it would take a float mul surviving into a calibrated graph that is then folded.{built}")


def tests_point(v: Verdict) -> str:
    """Why the PR's tests pass while the check never fires in the flow."""
    return (f"{PR}'s tests ({', '.join(f'`{t}`' for t in PR_TESTS)}) build their graph with `to_edge` and hand the "
            "pass that top-level edge program, a graph the pipeline never hands it: there the buffer write is still a "
            "BUFFER_MUTATION output, so the check fires in the tests and in no flow measured here; a test through "
            "`to_edge_transform_and_lower` (or the quantizer's `prepare_pt2e`) would show it.")


def answer(v: Verdict, quote=None) -> list[str]:
    """The verdict in sentences, each from the numbers (``Verdict.answer``): the lead a reviewer reads first, what was
    measured, why the PR's tests pass, then every finding in detail; ``quote`` writes a network's name (a Markdown
    reply: a code span, so a model's name stays text)."""
    return [*lead(v, quote), scope(v, quote), tests_point(v), *details(v, quote)]


def details(v: Verdict, quote=None) -> list[str]:
    """Every finding in sentences, each from the numbers, below the lead."""
    quote = quote or _short
    ints, fps = _int_flows(v), _fp_flows(v)
    out = [_where_int(v, ints), _where_fp(v, fps), _structural(ints, fps),
           *_markers(v, ints, fps),
           _after_calibration(v, quote),
           *(_no_site(n, quote) for n in v.networks if not n.sites)]
    return [s for s in out if s]


def _span(values, write) -> str:
    low, high = min(values), max(values)
    return write(low) if low == high else f"{write(low)} to {write(high)}"


def _where_int(v: Verdict, ints) -> str:
    """Where the INT flow folded, and whether its observers calibrate the folded conv."""
    if not ints:
        return ""
    per_chip: dict[str, list[int]] = {}
    for n, f in ints:
        counts = per_chip.setdefault(f.accelerator, [0, 0, 0])
        counts[0] += f.folds.get("tfa", 0)
        counts[1] += f.folds.get("lowering", 0)
        counts[2] += len(n.sites)
    if len({tuple(c) for c in per_chip.values()}) == 1:
        tfa, lowering, total = next(iter(per_chip.values()))
        chips = _names(per_chip)
        where = (f"folded {_of(tfa, total)} site(s) at transform-for-annotation (before calibration) and {lowering} in "
                 f"lowering, on " + (f"each of {chips}" if len(per_chip) > 1 else chips))
    else:
        where = "folded " + "; ".join(f"{_of(c[0], c[2])} at transform-for-annotation and {c[1]} in lowering on {chip}"
                                      for chip, c in per_chip.items())
    over = f", over the {len(v.networks)} networks," if len(v.networks) > 1 else ""
    text = f"In executorch {_version(v, 'executorch')}'s INT flow{over} the installed pass {where}"
    lowering = sum(c[1] for c in per_chip.values())
    observed = _observed_folded(v)
    if lowering:
        return text + f": {lowering} fold(s) happened after calibration, where {HAZARD}'s mechanism can arise."
    if not observed:
        return text + f": no site folded, so there is nothing for {PR}'s guard to keep and no fold to go stale."
    if all(o.observer is not None for _, _, o in observed):
        read = _sites(len({(n.target, o.site) for n, _, o in observed}))
        return text + (f": the observers are inserted after that fold and calibrate the folded conv ({read} read in "
                       "the calibrated graphs: no mul left, the conv's own observer sees the scaled range), so the "
                       f"stale-qparams mechanism of {HAZARD} cannot arise there.")
    return text + ": that fold runs before the observers are inserted, so no calibrated qparams exist yet to go stale."


def _where_fp(v: Verdict, fps) -> str:
    if not fps:
        return ""
    folded = sum(f.folds.get("lowering", 0) for _, f in fps)
    total = sum(len(n.sites) for n, _ in fps)
    return (f"In the FP flow ({fps[0][1].spec}, nothing quantized) it folded {_of(folded, total)} in the lowering "
            "call: nothing is calibrated there, so there are no qparams to go stale.")


def _structural(ints, fps) -> str:
    both = ints + fps
    if not both:
        return ""
    if not _same_as_upstream(both, STRUCTURAL):
        kept, total = _stopped(both, STRUCTURAL)
        return f"{PR}'s structural check kept {_of(kept, total)} site(s) feeding state from folding, in every flow."
    fp = (" and in the FP flow's lowering call, where the model's state enters the TOSA delegate's program as a user "
          "input and output (no BUFFER_MUTATION)") if fps else ""
    return (f"{PR}'s structural check changed no decision: state-aware without a marker folded exactly what upstream "
            f"folded, in the INT flow (at transform-for-annotation the pass has no graph signature){fp}.")


def _markers(v: Verdict, ints, fps) -> list[str]:
    """What the marker decides where the pass receives it, where a model author sets it, and what strict decides."""
    if not any(n.state_sites for n in v.networks):
        return []
    every = " on every accelerator" if len(v.accelerators) > 1 else ""

    def kept(key: str) -> list[tuple[str, str]]:
        """("k of n", "in the ... flow") per flow kind measured under ``key``."""
        (k_int, t_int), (k_fp, t_fp) = _stopped(ints, key), _stopped(fps, key)
        unreached = " (it does not reach that lowering call)" if key == MARKER_ON_PROGRAM and k_fp == 0 else ""
        return ([(_of(k_int, t_int), f"in the INT flow{every}")] if t_int else []) + (
            [(_of(k_fp, t_fp), f"in the FP flow{unreached}")] if t_fp else [])

    def joined(parts, first_noun: str = "") -> str:
        return " and ".join(f"{of}{first_noun if i == 0 else ''} {where}" for i, (of, where) in enumerate(parts))

    text = ("The marker decides: set on the graph the pass receives, it kept "
            + joined(kept(MARKER), " site(s) feeding state from folding"))
    on_program = kept(MARKER_ON_PROGRAM)
    if on_program:
        text += "; set on the exported program, as a model author would, it kept " + joined(on_program)
    strict = joined(kept(STRICT))
    return [text + ".", f"state-aware-strict (this project's guard, which also reads in-place writes) kept {strict}."]


def _after_calibration(v: Verdict, quote) -> str:
    stale = [(n, a) for n in v.networks for a in n.accelerators if a.stale is not None and a.stale.error is None]
    if not stale:
        return ""
    parts = [f"{quote(n.target)} on {a.accelerator} {db(a.upstream.worst_db)} -> {db(a.stale.worst_db)} dB "
             f"({db_change(_change(a.stale.worst_db, a.upstream.worst_db))})" for n, a in stale]
    return (f"Applied after calibration instead (a flow executorch {_version(v, 'executorch')} does not run, built "
            f"here to show {HAZARD}'s mechanism), the same fold quantizes the conv's output with its pre-fold qparams; "
            "the worst SQNR: " + "; ".join(parts) + ".")


def _no_site(n: Network, quote) -> str:
    """A network without a site: nothing to decide; its figures beside published ones."""
    text = (f"{quote(n.target)} has no conv->mul site: no fold rule changes anything there, and its error is the "
            "quantization's own")
    p = n.published
    ours = [a for a in n.accelerators if a.upstream.error is None]
    if p is None or not ours:
        return text + "."
    figures = "; ".join(f"{a.accelerator}: max |error| {_err4(a.upstream.max_abs)}, mean {_err4(a.upstream.mean_abs)}, "
                        f"{_frames(a.upstream.value(p.measure), n.steps)} of {n.steps} decisions changed at "
                        f"{p.threshold:g}" for a in ours)
    return (text + f". Over its first {n.steps} frames on the TOSA reference model: {figures}. {p.source} published "
            f"max |error| {p.max_abs:.4f}, mean {p.mean_abs:.4f} and {p.decisions_changed} changed decisions over "
            f"{p.frames} frames, on {p.engine}: theirs are the FVP's, ours the TOSA reference model's, on another "
            "recording.")


def _change(value, base):
    return None if value is None or base is None else value - base


# ---------------------------------------------------------------- tables


def flow_rows(v: Verdict) -> list[dict[str, str]]:
    """Per network and flow: where upstream folded, what the observers calibrate, and each rule's folds."""
    rows = []
    for n in v.networks:
        for f in n.flows:
            row = {"network": n.target, "flow": f"{f.name} ({f.accelerator})"}
            titles = _titles(v)
            if f.error is not None:
                rows.append({**row, FOLDED_BEFORE: MISSING, FOLDED_LOWERING: MISSING,
                             "observers calibrate": MISSING, **{titles[k]: MISSING for k in titles}})
                continue
            on = n.on(f.accelerator)
            if not f.calibrated:
                calibrate = "nothing (float)"
            elif on is not None and any(o.folded for o in on.observed):
                calibrate = "the folded conv (no mul)"
            else:
                calibrate = "the graph as exported (nothing folded)"
            row.update({FOLDED_BEFORE: _of(f.folds.get("tfa", 0), len(n.sites)) if f.calibrated
                        else "nothing calibrated",
                        FOLDED_LOWERING: _of(f.folds.get("lowering", 0), len(n.sites)),
                        "observers calibrate": calibrate})
            for key, title in titles.items():
                d = f.decision(key)
                row[title] = MISSING if d is None else _decided(d, len(n.sites))
            rows.append(row)
    return rows


def _titles(v: Verdict) -> dict[str, str]:
    """The decision columns' titles for this verdict: the installed pass named by its executorch version, and the
    structural check by what computed it (the PR's own pass file when one was given)."""
    titles = dict(TITLES, **{UPSTREAM: f"installed pass (executorch {_version(v, 'executorch')})"})
    hows = {d.how for n in v.networks for f in n.flows for d in f.decisions if d.key == STRUCTURAL}
    if hows and all("PR #21234's pass file" in h for h in hows):
        titles[STRUCTURAL] = f"{PR}'s structural check, no marker (the PR's own pass file)"
    return titles


CALLS = (("INT", "tfa", "INT flow: quantizer's rewrite (before calibration)"),
         ("INT", "lowering", "INT flow: to_edge_transform_and_lower"), ("FP", "lowering", "FP flow: to_edge_transform_and_lower"))


def reach_rows(v: Verdict) -> list[dict[str, str]]:
    """Per place a model author sets the marker: whether it is on the mul the fold pass receives, per call."""
    rows = []
    for placement in dict.fromkeys(r.placement for r in v.marker_reach):
        records = {(r.flow, r.call): r for r in v.marker_reach if r.placement == placement}
        row = {"marker set as": next(iter(records.values())).where}
        for flow, call, title in CALLS:
            r = records.get((flow, call))
            row[title] = MISSING if r is None else "error" if r.error else "reaches the pass" if r.reached else "lost"
        rows.append(row)
    return rows


def _decided(d, total: int) -> str:
    reasons = sorted({r for _, codes in d.skipped for r in codes})
    return f"folds {_of(len(d.folded), total)}" + (f" ({', '.join(reasons)})" if reasons else "")


def observer_rows(v: Verdict) -> list[dict[str, str]]:
    """Per folded site in each INT flow: the observer of the folded conv's output and the ranges calibrated."""
    return [{"network": n.target, "accelerator": a.accelerator, "site": o.site, "observer": o.observer or MISSING,
             "folded conv's range": _range(o.folded_range),
             "unfolded conv's range (pre-fold)": _range(o.unfolded_range),
             "unfolded mul's range": _range(o.unfolded_mul_range)}
            for n, a, o in _observed_folded(v)]


def _range(r) -> str:
    return MISSING if r is None else f"[{r[0]:.4g}, {r[1]:.4g}]"


def cost_rows(v: Verdict) -> list[dict[str, str]]:
    """Per network and accelerator: upstream, skipping the carried-state sites, and the fold after calibration."""
    rows = []
    for n in v.networks:
        for a in n.accelerators:
            up, sk, st = a.upstream, a.skipped, a.stale
            rows.append({
                "network": n.target, "accelerator": a.accelerator, "steps": str(n.steps),
                "cycles installed": cycles(up.cycles), "cycles skipped": cycles(sk.cycles) if sk else MISSING,
                "Δ cycles": cycles_change(_change(sk.cycles, up.cycles)) if sk else MISSING,
                "mean dB installed": db(up.mean_db), "mean dB skipped": db(sk.mean_db) if sk else MISSING,
                "worst dB installed": db(up.worst_db), "worst dB skipped": db(sk.worst_db) if sk else MISSING,
                "mean |error| installed": _err(up.mean_abs), "mean |error| skipped": _err(sk.mean_abs) if sk else MISSING,
                "task installed": _task(up, n), "task skipped": _task(sk, n) if sk else MISSING,
                "folded after calibration, worst dB (not an ExecuTorch flow)":
                    f"{db(st.worst_db)} ({db_change(_change(st.worst_db, up.worst_db))})" if st and st.error is None
                    else MISSING})
    return rows


def _task(f: Figures | None, n: Network) -> str:
    if f is None:
        return MISSING
    if f.error is not None:
        return "error"
    parts = []
    for name, value in f.task:
        if name.startswith("decision-mismatch"):
            parts.append(f"{name}: {_frames(value, n.steps)} of {n.steps} frames")
        else:
            parts.append(f"{name} {_task_value(name, value)}")
    return "; ".join(parts) or MISSING


def published_rows(v: Verdict) -> list[dict[str, str]]:
    """Per network with published figures: theirs, then ours on each accelerator."""
    rows = []
    for n in v.networks:
        p = n.published
        if p is None:
            continue
        rows.append({"network": n.target, "figures": f"{p.source} (published)", "engine": p.engine,
                     "frames": str(p.frames), "max |error|": f"{p.max_abs:.4f}", "mean |error|": f"{p.mean_abs:.4f}",
                     f"decisions changed at {p.threshold:g}": str(p.decisions_changed)})
        for a in n.accelerators:
            up = a.upstream
            share_value = up.value(p.measure)
            rows.append({"network": n.target, "figures": f"this verdict, {a.accelerator}",
                         "engine": f"the TOSA reference model ({a.accelerator}'s TOSA flatbuffer), "
                                   f"{n.stream or 'the example inputs'}",
                         "frames": str(n.steps), "max |error|": _err4(up.max_abs), "mean |error|": _err4(up.mean_abs),
                         f"decisions changed at {p.threshold:g}":
                             MISSING if share_value is None else str(_frames(share_value, n.steps))})
    return rows


def _err4(value) -> str:
    return MISSING if value is None else f"{value:.4f}"


def compiler_lines(v: Verdict) -> list[str]:
    """One line per accelerator: the compiler settings its cycles were made under."""
    seen = {}
    for n in v.networks:
        for a in n.accelerators:
            if a.compiler:
                seen.setdefault(a.accelerator, a.compiler)
    return [f"cycles on {name}: {line}; {ESTIMATE}" for name, line in seen.items()]


def method_lines(v: Verdict) -> list[str]:
    """How each network was run: steps, stream, calibration."""
    return [f"{n.target}: {n.steps} step(s)" + (f" of {n.stream}" if n.stream else "")
            + f"; calibration: {n.calibration}" for n in v.networks]


def _notes(v: Verdict) -> list[str]:
    out = []
    for n in v.networks:
        for f in n.flows:
            if f.error is not None:
                out.append(f"{n.target}, {f.name} flow ({f.accelerator}): {f.error}")
        for a in n.accelerators:
            if a.stale is None and a.stale_note and n.sites:
                out.append(f"{n.target} on {a.accelerator}: {a.stale_note}")
    return out


def promises(v: Verdict) -> list[str]:
    """What the numbers do not promise, for what this verdict holds."""
    out = ["Vela's cycles are its estimates for the compiler settings named, not measurements on silicon.",
           "The dB, errors and task measures come from the bit-accurate TOSA reference model on each network's own "
           "inputs and calibration (how it was measured, above): they hold for these networks and inputs, not for a "
           "data set or for every model."]
    if any(n.published for n in v.networks):
        out.append("Published figures come from another engine (an FVP running the compiled program) and another "
                   "recording: set beside ours, never mixed with them.")
    if any(a.stale is not None for n in v.networks for a in n.accelerators):
        out.append("The fold after calibration is a flow this executorch does not run: it shows the mechanism, not a "
                   "hazard of the flow you ship.")
    return out


# ---------------------------------------------------------------- text and HTML


def verdict_text(v: Verdict) -> str:
    lines = [f"The verdict on {PR} (executorch {_version(v, 'executorch')}, {_names(v.accelerators)} and the FP flow)",
             ""]
    lines += [*lead(v), "", scope(v), tests_point(v), WORDS, "", "In detail:"]
    lines += [f"- {s}" for s in details(v)]
    for title, rows in (("where each flow folds, and what each rule decides:", flow_rows(v)),
                        ("what the INT flow's observers calibrate:", observer_rows(v)),
                        ("what skipping the carried-state sites costs:", cost_rows(v)),
                        ("where a marker set by a model author reaches the pass:", reach_rows(v)),
                        ("beside published figures:", published_rows(v))):
        if rows:
            lines += ["", title, *text_table(rows)]
    lines += ["", *compiler_lines(v), *method_lines(v), *(f"note: {n}" for n in _notes(v)), "",
              "what these numbers do not promise:", *(f"- {p}" for p in promises(v))]
    return "\n".join(lines)


def verdict_html(v: Verdict) -> str:
    head = (f"<b>The verdict on {escape(PR)}</b> (executorch {escape(_version(v, 'executorch'))}, "
            f"{escape(_names(v.accelerators))} and the FP flow)"
            + "".join(f"<p>{escape(s)}</p>" for s in (*lead(v), scope(v), tests_point(v), WORDS))
            + "<details><summary>In detail</summary><ul>"
            + "".join(f"<li>{escape(s)}</li>" for s in details(v)) + "</ul></details>")
    tail = ""
    for title, rows in (("What the INT flow's observers calibrate", observer_rows(v)),
                        ("What skipping the carried-state sites costs", cost_rows(v)),
                        ("Where a marker set by a model author reaches the pass", reach_rows(v)),
                        ("Beside published figures", published_rows(v))):
        if rows:
            tail += f"<h4>{escape(title)}</h4>" + html_table("fi-rows", "", rows)
    tail += "".join(f"<div><small>{escape(line)}</small></div>"
                    for line in (*compiler_lines(v), *method_lines(v), *(f"note: {n}" for n in _notes(v))))
    return html_table("fi-verdict", head + "<h4>Where each flow folds, and what each rule decides</h4>", flow_rows(v),
                      tail)


# ---------------------------------------------------------------- the reply


def verdict_markdown(v: Verdict, limit: int | None = None) -> str:
    """The reply a reviewer pastes into the PR: the answer, the tables, how it was measured and what it does not
    promise; local paths redacted, no longer than ``limit`` (GitHub's comment limit by default): the method lines
    and the observers' table are cut first, said so."""
    limit = GITHUB_COMMENT_LIMIT if limit is None else limit
    redact = Redactor()

    def table(rows) -> list[str]:
        return markdown_table(list(rows[0]), [[md_code(redact(r[c]), cell=True) for c in rows[0]] for r in rows])

    def name(target: str) -> str:
        return md_code(redact(_short(target)))

    given = v
    v = replace(v, networks=tuple(n for n in v.networks if n.sites))  # the reply is about networks with a site

    def document(full: bool) -> str:
        versions = ", ".join(f"{k} {val}" for k, val in v.versions)
        out = [f"**The verdict on {PR}, measured** ({versions})", ""]
        out += [redact(s) for s in (*lead(v, name), "")]
        out += [f"_{redact(scope(given, name))}_", "", redact(tests_point(v)), "", f"_{WORDS}_", ""]
        if not v.networks:
            return "\n".join(out) + "\n"
        out += ["**Where each flow folds, and what each rule decides** (sites folded of the network's sites; "
                "the INT flow's rows are its real runs, the FP flow's the installed pass on the graph that flow hands "
                "it)", ""] + table(flow_rows(v))
        if full and observer_rows(v):
            out += ["", "**What the INT flow's observers calibrate** (the conv's output, per folded site)", ""]
            out += table(observer_rows(v))
        out += ["", "**What skipping the sites feeding state costs** (skipped: the guard with a marker on each site "
                "feeding state; mean dB: the worst output's SQNR averaged over the steps; worst dB: at its worst step)",
                ""] + table(cost_rows(v))
        if reach_rows(v):
            out += ["", "**Where a marker set by a model author reaches the pass** (the exported program's site muls "
                    "marked, each flow run through, the graph every fold call receives read)", ""]
            out += table(reach_rows(v))
        if published_rows(v):
            out += ["", "**Beside published figures**", ""] + table(published_rows(v))
        out += [""] + [f"- {redact(line)}" for line in compiler_lines(v)]
        if full:
            out += ["", "<details><summary>Every finding, in detail</summary>", ""]
            out += [f"- {redact(s)}" for s in details(v, name)]
            out += ["", "</details>"]
            out += ["", "<details><summary>How it was measured</summary>", ""]
            out += [f"- {md_code(redact(line))}" for line in method_lines(v)]
            out += ["", "</details>"]
        else:
            out += ["", "_(how each network was run is left out to fit GitHub's limit)_"]
        notes = _notes(v)
        if notes:
            out += [""] + [f"- note: {md_code(redact(n))}" for n in notes]
        out += ["", "What these numbers do not promise:", ""] + [f"- {p}" for p in promises(v)]
        return "\n".join(out) + "\n"

    text = document(True)
    if len(text) > limit:
        text = document(False)
    return text if len(text) <= limit else text[: max(0, limit - 2)] + "…\n"


__all__ = ["answer", "details", "lead", "scope", "tests_point", "compiler_lines", "cost_rows", "flow_rows", "method_lines",
           "observer_rows", "promises", "published_rows", "verdict_html", "verdict_markdown", "verdict_text"]

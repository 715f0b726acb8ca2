"""Two example fold rules of the user's: guards read before the installed pass runs.

Each is a plain function of an ``inspector.RuleContext`` that returns None (the installed
``FoldScalarMulIntoConvPass`` decides the site as it always does) or ``inspector.Skip(code,
detail)`` (the site is kept from the pass and shown as skipped with reason ``rule:CODE``).
Importing this file registers nothing; name a guard to use it::

    inspector.analyze("sample:conv_mul_wide_dynamic_range_scale",
                      rule="sample_models/rules.py:keep_wide_scales")
    python -m inspector analyze sample:stateful_conv_mul --rule sample_models/rules.py:skip_reaching_outputs

A guard runs once per site on every decide (a marker toggle decides again): keep it cheap, and
only read the context (never change ``site.mul`` or its graph).
"""

from __future__ import annotations

from inspector import RuleContext, Skip

# max|s| / min|s| from which ``keep_wide_scales`` keeps a mul out of the conv.
WIDE_SCALE_RATIO = 100.0


def keep_wide_scales(site: RuleContext) -> Skip | None:
    """upstream, but keep muls whose per-channel scale spans 100x or more (max|s| / min|s|) unfolded.

    Folded, such a scale moves into the conv: its output, quantized per tensor, then holds channels
    whose ranges differ by that factor, and the small ones lose resolution. One number (a scalar,
    a one-element tensor) spans nothing, whatever its ratio says (a Python 0 has ratio inf).
    """
    ratio = site.scale.ratio  # None when the scale is not a constant
    if site.scale.kind not in ("scalar", "scalar-tensor") and ratio is not None and ratio >= WIDE_SCALE_RATIO:
        return Skip(code="wide-scale", detail=f"max|s|/min|s| = {ratio:.3g} (|s| from {site.scale.min_abs:.3g} to "
                                  f"{site.scale.max_abs:.3g}), at least {WIDE_SCALE_RATIO:g}")
    return None


def skip_reaching_outputs(site: RuleContext) -> Skip | None:
    """upstream, but skip every site whose mul output reaches a graph output (a crude "recurrent" guard).

    An output may be fed back as the next call's input (recurrent state the graph cannot show),
    so this guard keeps every scale that can reach one out of the conv. It is crude: most
    sites of a plain feed-forward model reach an output too.
    """
    if site.reaches_output:
        return Skip(code="reaches-output", detail=f"{site.mul.name} reaches the graph's output")
    return None

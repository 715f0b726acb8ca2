"""A measurement of a user's own, in a file of its own: max |q - f| written again (tests/test_metrics.py)."""

import inspector


@inspector.metric("max-err", unit="", better="lower", help="the largest |quantized - float|, written again")
def max_err(reference, quantized):
    return float((quantized.double() - reference.double()).abs().max())

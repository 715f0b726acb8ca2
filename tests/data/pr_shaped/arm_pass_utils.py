"""Stand-in for a pull request's ``arm_pass_utils.py``: one helper the installed executorch lacks.

Written for fold-inspector's tests (no executorch code in it). A pass file beside it imports
``is_carried_quant_state`` from ``executorch.backends.arm._passes.arm_pass_utils``; the installed release has no
such name, so the loader takes this definition (and the key it reads) from here.
"""

STATE_KEY = "carried_quant_state"  # the top-level node.meta key a model author sets on carried state


def is_carried_quant_state(node) -> bool:
    """True when the author put ``STATE_KEY`` on this node's own meta (not in ``meta["custom"]``)."""
    return node.meta.get(STATE_KEY) is True

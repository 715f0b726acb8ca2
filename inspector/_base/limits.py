"""Bounds on what one call may ask for, so bad input fails at once instead of exhausting the machine."""

from .errors import InspectorError, quoted
import torch

# Recurrent steps of one comparison (API, CLI, widget and sessions alike). A step is one
# reference run of the whole model per variant; 1,000 steps of a small streaming model
# take minutes, more is a typo.
MAX_STEPS = 1000

# Elements of one example input made from a shape (--input-shape, sessions): 2**26
# float32 values are 256 MiB, and the flow holds several copies of every input.
MAX_INPUT_ELEMENTS = 2 ** 26
MAX_INPUT_DIMS = 8  # a conv input has 3 to 5


def check_steps(steps, what: str = "steps") -> int:
    """``steps`` as an int in 1..MAX_STEPS, or an InspectorError naming the bound."""

    if isinstance(steps, bool) or not isinstance(steps, int):
        raise InspectorError(f"{what} must be an integer from 1 to {MAX_STEPS}, got {quoted(steps)}")
    if not 1 <= steps <= MAX_STEPS:
        raise InspectorError(f"{what} must be from 1 to {MAX_STEPS}, got {steps:,}")
    return steps


def check_shape(shape: tuple[int, ...], what: str = "input shape") -> tuple[int, ...]:
    """A shape whose element count stays within MAX_INPUT_ELEMENTS, or an InspectorError with the number."""

    if len(shape) > MAX_INPUT_DIMS:
        raise InspectorError(f"{what} has {len(shape):,} dimensions; the limit is {MAX_INPUT_DIMS}")
    numel = 1
    for d in shape:
        numel *= d
    if numel > MAX_INPUT_ELEMENTS:
        raise InspectorError(
            f"{what} {'x'.join(map(str, shape))} has {numel:,} elements; the limit is {MAX_INPUT_ELEMENTS:,} "
            "(give a smaller input: the fold's decisions do not depend on the input size)"
        )
    return shape


# What one variant's run holds, on top of what the model is: a worker process with torch, executorch
# and the quantizer imported (measured here: 500-700 MiB), and copies of every weight along the flow
# (the exported copy, prepared, converted, re-exported, edge and lowered programs, the reference
# model's buffers). Outputs are kept per step.
WORKER_BYTES = 600 * 2 ** 20
WEIGHT_COPIES = 10
STEP_COPIES = 4


def available_memory() -> int | None:
    """Bytes the machine can still give (``MemAvailable``), or None where it cannot tell."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_estimate(target, steps: int, variants: int, workers: int, isolated: bool = False) -> int:
    """Bytes a comparison of ``variants`` variants of ``target`` for ``steps`` steps needs at once,
    ``workers`` of them side by side (each in a worker process but one, or every one if ``isolated``)."""

    program = target.exported
    tensors = [*program.state_dict.values(), *program.constants.values()]
    weights = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    io = sum(x.numel() * x.element_size() for x in target.inputs if isinstance(x, torch.Tensor))
    at_once = max(1, min(variants, workers))
    per_variant = WEIGHT_COPIES * weights + STEP_COPIES * steps * io
    processes = at_once if isolated else at_once - 1
    return at_once * per_variant + processes * WORKER_BYTES + steps * io


def check_memory(target, steps: int, variants: int, workers: int, isolated: bool = False) -> None:
    """Refuse, before anything starts, a run that would not fit the memory the machine has left."""

    available = available_memory()
    if available is None:
        return
    needed = memory_estimate(target, steps, variants, workers, isolated)
    if needed > available:
        gib = 2 ** 30
        raise InspectorError(
            f"this comparison needs about {needed / gib:.1f} GiB ({variants} variant(s), {steps} step(s), "
            f"{min(variants, workers)} side by side) but the machine has {available / gib:.1f} GiB available; "
            "try workers=1, fewer steps or a smaller input")

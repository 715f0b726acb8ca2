"""Bounds on what one call may ask for, so bad input fails at once instead of exhausting the machine."""

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
    from .errors import InspectorError, quoted

    if isinstance(steps, bool) or not isinstance(steps, int):
        raise InspectorError(f"{what} must be an integer from 1 to {MAX_STEPS}, got {quoted(steps)}")
    if not 1 <= steps <= MAX_STEPS:
        raise InspectorError(f"{what} must be from 1 to {MAX_STEPS}, got {steps:,}")
    return steps


def check_shape(shape: tuple[int, ...], what: str = "input shape") -> tuple[int, ...]:
    """A shape whose element count stays within MAX_INPUT_ELEMENTS, or an InspectorError with the number."""
    from .errors import InspectorError

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

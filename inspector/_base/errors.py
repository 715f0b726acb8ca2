"""Errors the inspector raises on bad input: one line that says what was wrong and what to do."""

import traceback


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an exception's message (its type name if it has none).

    ExecuTorch wraps a failing pass as "An error occurred when running the 'X' pass after the
    following passes: [...]"; that is shortened to the part that names the pass.
    """
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    for line in lines:
        if "error occurred when running" in line:
            return line.split(" after the following passes")[0].strip()
    return lines[0] if lines else type(exc).__name__


def describe(exc: BaseException) -> str:
    """``"TypeName: first line"``, for one-line error messages.

    When ExecuTorch's pass manager wrapped a pass's error (a bare ``Exception`` naming the pass, which in the Arm
    pipeline is an adapter around the real one), the error it wrapped is described instead, with the pass that
    raised it: "RuntimeError: ... (in ExecuTorch's FuseQuantizedActivationPass)".
    """
    cause = exc.__cause__
    if cause is not None and _WRAPPED in str(exc):
        where = _innermost_pass(cause)
        return describe(cause) + (f" (in ExecuTorch's {where})" if where else "")
    return f"{type(exc).__name__}: {first_line(exc)}"


_WRAPPED = "error occurred when running"  # ExecuTorch's PassManager: "An error occurred when running the 'X' pass"


def _innermost_pass(exc: BaseException) -> str | None:
    """The class of the innermost pass object on ``exc``'s traceback (a frame's ``self`` with a ``call`` method whose
    class is named ``*Pass``, ExecuTorch's convention), or None."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and type(owner).__name__.endswith("Pass") and callable(getattr(owner, "call", None)):
            found = type(owner).__name__
        tb = tb.tb_next
    return found


def quoted(value, limit: int = 60) -> str:
    """``repr(value)``, clipped: a user's string quoted in an error stays one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 2] + "…" + text[-1]


def listing(items, limit: int = 240) -> str:
    """Items joined with commas, clipped to about ``limit`` characters ("..., and 12 more")."""
    items = [str(i) for i in items]
    out, total = [], 0
    for i, item in enumerate(items):
        if out and total + len(item) > limit:
            return ", ".join(out) + f", and {len(items) - i} more"
        out.append(item if len(item) <= limit else item[: limit - 1] + "…")
        total += len(item) + 2
    return ", ".join(out)


class InspectorError(Exception):
    """A user-facing error; its message is one line that names the problem and the fix.

    What the user does not need to see by default travels with it in ``details``: the whole
    traceback of its cause when it was raised ``from exc`` (formatted when read), then the text
    the raiser attached (``attached``: what the backend printed while failing, or the traceback
    a worker process sent as text). ``--debug`` prints it, ``--json`` carries it, the widget and
    the HTML report show it behind a disclosure.
    """

    def __init__(self, message: str = "", *, details: str = "") -> None:
        super().__init__(message)
        self.attached = details  # text from outside this process's chain (a worker's traceback, the backend's output)

    @property
    def cause_traceback(self) -> str:
        """The formatted traceback of the exception this one was raised from, with its own chain ("" if none)."""
        cause = self.__cause__
        if cause is None:
            return ""
        return "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))

    @property
    def details(self) -> str:
        """Everything behind the one line: the cause's traceback, then the attached text ("" if neither)."""
        return "\n".join(part.rstrip("\n") for part in (self.cause_traceback, self.attached) if part.strip())

    @details.setter
    def details(self, text: str) -> None:
        # Setting replaces the attached text; the cause's traceback is never stored, it is read from the chain.
        self.attached = text


class ExplanationMismatchWarning(UserWarning):
    """The explainer's reasons disagree with what the real installed pass did at a site."""


class FoldPassCrash(InspectorError):
    """The installed fold pass itself raised while folding a site (a bug in the pass, not in the input)."""

    def __init__(self, message: str, site_id: str, mul: str) -> None:
        super().__init__(message)
        self.site_id = site_id  # the site being folded when the pass raised
        self.mul = mul  # its mul node name


class UnknownMarker(InspectorError):
    """A carried-state marker names no site and no node of the graph the fold pass receives."""


def crash_behind(exc: BaseException | None, kind: type = FoldPassCrash) -> "InspectorError | None":
    """The ``kind`` error (default FoldPassCrash) behind ``exc``, if any: pass managers wrap
    the errors of their passes."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None

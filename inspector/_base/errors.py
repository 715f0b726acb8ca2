"""Errors the inspector raises on bad input: one line that says what was wrong and what to do."""


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
    """``"TypeName: first line"``, for one-line error messages."""
    return f"{type(exc).__name__}: {first_line(exc)}"


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

    ``details`` keeps what the user does not need to see by default (what the backend
    printed while failing); the CLI shows it under ``--debug``.
    """

    def __init__(self, message: str = "", *, details: str = "") -> None:
        super().__init__(message)
        self.details = details


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

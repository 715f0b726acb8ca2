"""Errors the inspector raises on bad input: one line that says what was wrong and what to do."""


class InspectorError(Exception):
    """A user-facing error; its message is one line that names the problem and the fix."""


class ExplanationMismatchWarning(UserWarning):
    """The explainer's reasons disagree with what the real installed pass did at a site."""


class FoldPassCrash(InspectorError):
    """The installed fold pass itself raised while folding a site (a bug in the pass, not in the input)."""

    def __init__(self, message: str, site_id: str, mul: str) -> None:
        super().__init__(message)
        self.site_id = site_id  # the site being folded when the pass raised
        self.mul = mul  # its mul node name


def crash_behind(exc: BaseException | None) -> "FoldPassCrash | None":
    """The FoldPassCrash behind ``exc``, if any: pass managers wrap the errors of their passes."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, FoldPassCrash):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None

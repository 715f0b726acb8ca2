"""Errors the inspector raises on bad input: one line that says what was wrong and what to do."""


class InspectorError(Exception):
    """A user-facing error; its message is one line that names the problem and the fix."""


class ExplanationMismatchWarning(UserWarning):
    """The explainer's reasons disagree with what the real installed pass did at a site."""

"""Fold rules: the installed pass, the proposed state-aware guard, user rules from code or files,
one registry, and how a rule runs the real pass."""

"""The advice kept as a rule: a file with one guard that folds exactly the recommended set, loaded and registered.

The file is plain Python the user can read, edit and hand around; ``--rule FILE:NAME`` (or
``inspector.rules.get("FILE:NAME")``) loads it again in any process. The site ids are written in the guard's own
body, so the rule's identity (its source) changes with the set.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from .._base.files import write_text
from .._base.hashing import digest
from .._rules.rules import Rule, load_rule
from .._targets.load import import_file
from .._base.errors import InspectorError, quoted

_TEMPLATE = '''"""Which sites fold on {accelerator}: the advice of fold-inspector for {target}.

Budget {budget:g} dB of SQNR (the worst output, at the worst step) on the calibration inputs; the recommendation
folds {n_folded} of {n_sites} sites and leaves the rest to the quantizer. Load it with --rule {file}:{function}.
"""

import inspector

FOLDS = {folds!r}


@inspector.rule({name!r}, help={help!r}, base="upstream")
def {function}(site):
    """Fold only the sites the advice chose; the installed pass decides those as it always does."""
    if site.site not in {folds!r}:
        return inspector.Skip("not-advised", "the advice for {accelerator} leaves this site unfolded")
    return None
'''


def keep(advice, name: str | None = None, path=None):
    """Write ``advice`` as a rule file (default ``advice_<accelerator>.py`` here), load it, register it."""
    name = name or f"advice-{advice.accelerator}"
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,47}", name):
        raise InspectorError(f"a kept rule's name is a short slug of lowercase letters, digits and dashes, "
                             f"got {quoted(name)}")
    function = re.sub(r"\W", "_", name)
    path = Path(path) if path is not None else Path.cwd() / f"{function}.py"
    if path.suffix != ".py":
        raise InspectorError(f"a rule file ends in .py, got {quoted(str(path))}")
    help_line = (f"fold only the {len(advice.folded)} site(s) advised for {advice.accelerator} within "
                 f"{advice.budget_db:g} dB")
    text = _TEMPLATE.format(accelerator=advice.accelerator, target=advice.target, budget=advice.budget_db,
                            n_folded=len(advice.folded), n_sites=len(advice.sites), file=path.name, name=name,
                            folds=tuple(advice.folded), help=help_line, function=function)
    write_text(path, text)
    return load_rule(f"{path}:{function}")




# ---------------------------------------------------------------- one set of sites as a rule (the search's variants)

_SET_TEMPLATE = '''"""fold-inspector's advice search: a rule folding exactly these sites (written by advise; safe to delete)."""


def {function}(site):
    """Fold exactly {n} advised site(s)."""
    if site.site not in {folds!r}:
        from inspector import Skip
        return Skip("not-in-set", "this set of the advice's search leaves the site unfolded")
    return None
'''


def set_rule(folds) -> Rule:
    """A rule that folds exactly ``folds`` (site ids) where the installed pass would: a guard in a file of its
    own (so worker processes load it by its path, and its identity, the guard's source, is the set), not
    registered (the search's sets never crowd the rules users pick from)."""
    folds = tuple(sorted(folds))
    function = "advice_set_" + digest(folds)[:12]
    folder = Path(tempfile.gettempdir()) / f"fold-inspector-advice-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(folder)  # a folder someone else planted there would run their code: refuse it
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise InspectorError(f"{folder} is not a folder of yours that only you can write: remove it and run again")
    path = folder / f"{function}.py"
    text = _SET_TEMPLATE.format(function=function, n=len(folds), folds=folds)
    if not path.is_file() or path.read_text() != text:
        write_text(path, text)
    fn = getattr(import_file(path), function)
    return Rule(name=function, help=f"fold exactly {len(folds)} site(s) (a set of the advice's search)",
                source=f"the user's guard {path.name}:{function}", check=fn, origin=f"{path.resolve()}:{function}")


__all__ = ["keep", "set_rule"]

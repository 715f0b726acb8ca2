"""Sessions: what the inspector's screen shows, saved as JSON and read back with every field checked.

A session file is data that may come from a stranger (docs/design.md, "What is trusted"):
reading one never runs code. Its target may name a Python file (``model.py:Net``), and
so may its rule and variants (``rules.py:no_wide_scale``, a rule of the user's); building the
target or the rule imports the file, so ``Session.read`` refuses such a session unless the
caller says it trusts it. Every field is checked against the schema and
a bad one is reported in one line that names the field.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._base.files import write_text
from .._base.limits import MAX_STEPS
from .._decide.stages import STAGES
from .._numbers.results import Comparison
from .._base.errors import InspectorError
from .._rules.rules import DEFAULT_VARIANTS, rules
from .._numbers.quantization import quantizations
from .._cost.accelerators import SETTINGS, TOSA_INT, accelerator_of, accelerators
from ..present.render import GRAPH_SCOPES, GRAPH_VIEWS
from .._base.codec import Record
from .._base.data import FORMAT, READS

SESSION_VERSION = FORMAT  # the one save-format version; version 1 said "policy", and is still read (docs/words.md)
MAX_SESSION_BYTES = 64 * 2 ** 20  # a session with results of 1,000 steps is a few MB
_MAX_TEXT = 4096  # longest string field (a site id, a marker, a target path)


@dataclass(frozen=True, kw_only=True)
class Session(Record):
    """One saved screen of the inspector."""

    target: str | None  # what to analyze: "sample:NAME", "model.pt2", "model.py:Net"; None for in-memory models
    stage: str  # aten | tfa | edge | lowering
    rule: str  # a rule's name, or "path/to/rules.py:NAME" for a rule of the user's kept in a file
    markers: tuple[str, ...] = ()  # site ids or node names marked carried state
    selected: str | None = None  # the selected site id
    variants: tuple[str, ...] = DEFAULT_VARIANTS  # rules to run on the reference (names or rule files)
    quantizations: tuple[str, ...] = ("a8w8",)  # the quantizations each variant runs under (inspector.quantizations)
    steps: int = 1  # recurrent steps of a reference run
    accelerator: str = TOSA_INT.name  # the name of what a reference run lowers for (inspector.accelerators)
    graph_view: str = "side by side"  # before | after | side by side
    graph_scope: str = "focus"  # focus | whole
    results: Comparison | None = None  # the last reference results
    results_for: tuple[str, str, tuple[str, ...]] | None = None  # (stage, rule, markers) they were computed for

    json_format = "session"
    json_format_key = "version"  # a session says "version" where other files say "format" (docs/words.md)

    @classmethod
    def read(cls, path: str | os.PathLike, *, trust: bool = False) -> Session:
        """Read and check a session file. It never runs code: a session whose target or rules name a
        Python file is refused unless ``trust=True`` (building it imports the file)."""
        return read_session(path, trust=trust)

    def save(self, path: str | os.PathLike) -> Path:
        """Write this session as JSON to ``path`` (atomically; one-line error if it cannot)."""
        return save_session(self, path)

    def untrusted_message(self, path: str | os.PathLike, file: str | None = None) -> str:
        """The one line refusing this session (read from ``path``) until the caller trusts ``file``."""
        return untrusted_message(self, path, file)

    @property
    def runs_code(self) -> bool:
        """Building the target or a rule imports a Python file (``file.py:Class``, ``rules.py:NAME``)."""
        return bool(self.code_files)

    @property
    def code_files(self) -> tuple[str, ...]:
        """The Python files building this session would import: the target's, then the rules'."""
        specs = [self.target, self.rule, *self.variants]
        return tuple(dict.fromkeys(x.rpartition(":")[0] for x in specs if runs_code(x)))

    # Written by hand: a session file may come from a stranger, so each field is checked against what the screen
    # accepts (choices, limits, rules that name files) and a bad one is refused in one line naming it.
    @classmethod
    def from_dict(cls, data: Any, source: str = "session") -> Session:
        """A checked ``Session`` from parsed JSON; an InspectorError names the first bad field."""
        check = _Checker(source)
        if not isinstance(data, dict) or "version" not in data:
            raise InspectorError(f"{source} is not a fold-inspector session (no version field)")
        if data["version"] not in READS or isinstance(data["version"], bool):
            raise InspectorError(f"{source} is not a fold-inspector session of version "
                                 f"{' or '.join(map(str, READS))} (version {check.show(data['version'])})")
        named = "rule" if data["version"] >= 2 else "policy"  # version 1 named the rule "policy"
        known = {"version", "target", "stage", named, "markers", "selected", "variants", "quantizations", "steps",
                 "accelerator", "graph_view", "graph_scope", "results", "results_for"}
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise InspectorError(f"{source}: unknown field {check.show(unknown[0])}; known: {', '.join(sorted(known))}")
        results = data.get("results")
        results_for = data.get("results_for")
        if (results is None) != (results_for is None):
            raise InspectorError(f"{source}: 'results' and 'results_for' must be given together")
        results_for = check.results_for(results_for) if results_for is not None else None
        session = cls(
            target=check.text(data, "target", optional=True),
            stage=check.choice(data, "stage", STAGES),
            rule=check.rule(data, named),
            markers=check.texts(data, "markers", default=()),
            selected=check.text(data, "selected", optional=True, default=None),
            variants=check.rules(data, "variants", default=cls.variants),
            quantizations=check.texts(data, "quantizations", default=cls.quantizations, choices=tuple(quantizations),
                                      nonempty=True, kind="quantization names"),
            steps=check.steps(data, "steps", default=1),
            accelerator=check.accelerator(data, "accelerator", default=cls.accelerator),
            graph_view=check.choice(data, "graph_view", GRAPH_VIEWS, default=cls.graph_view),
            graph_scope=check.choice(data, "graph_scope", GRAPH_SCOPES, default=cls.graph_scope),
            results=check.results(results) if results is not None else None,
            results_for=results_for,
        )
        return session


def runs_code(target: Any) -> bool:
    """Whether building ``target`` imports a Python file (``path/to/file.py:ClassName``)."""
    return isinstance(target, str) and ".py:" in target and not target.startswith("sample:")


def save_session(session: Session, path: str | os.PathLike) -> Path:
    """Write ``session`` as JSON to ``path`` (atomically; one-line error if it cannot)."""
    return write_text(path, json.dumps(session.to_dict(), indent=2, allow_nan=False))


def read_session(path: str | os.PathLike, *, trust: bool = False) -> Session:
    """Read and check a session file. It never runs code: a session whose target names a
    Python file is refused unless ``trust=True`` (building that target imports the file)."""
    path = Path(path)
    if not path.is_file():
        raise InspectorError(f"no such session file: {path}" if not path.exists() else f"{path} is not a file")
    size = path.stat().st_size
    if size > MAX_SESSION_BYTES:
        raise InspectorError(f"{path.name} is {size:,} bytes; a session is at most {MAX_SESSION_BYTES:,}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (OSError, UnicodeDecodeError) as exc:
        raise InspectorError(f"cannot read session {path.name}: {exc}") from None
    except ValueError as exc:
        raise InspectorError(f"{path.name} is not a fold-inspector session: invalid JSON ({exc})") from None
    except RecursionError:
        raise InspectorError(f"{path.name} is not a fold-inspector session: JSON nested too deeply") from None
    session = Session.from_dict(data, source=path.name)
    if session.runs_code and not trust:
        raise InspectorError(untrusted_message(session, path))
    return session


def untrusted_message(session: Session, path: str | os.PathLike, file: str | None = None) -> str:
    """The one line refusing ``session`` until the caller trusts the Python file it names."""
    file = file or session.code_files[0]
    more = len(session.code_files) - 1
    return (f"session {Path(path).name} names the Python file {_clip(os.path.abspath(file))!s}"
            + (f" (and {more} more)" if more else "") + "; loading it runs that file's code. Pass trust=True "
            "(or press 'Trust and load' in the widget) only if you trust it")


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Checker:
    """Field checks with one-line errors naming the session and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def show(self, value: Any) -> str:
        return _clip(repr(value), 60)

    def fail(self, field: str, what: str, value: Any) -> InspectorError:
        return InspectorError(f"{self.source}: field '{field}' must be {what}, got {self.show(value)}")

    def accelerator(self, data: dict, field: str, default: str) -> str:
        """A registered accelerator, or an Ethos-U target with the settings Vela takes (``ethos-u85-256:Dedicated_Sram``:
        read, never run, against Vela's config file)."""
        value = data.get(field, default)
        if isinstance(value, str) and SETTINGS in value and len(value) <= _MAX_TEXT:
            try:
                return accelerator_of(value).name
            except InspectorError as exc:
                raise self.fail(field, f"an accelerator Vela takes ({exc})", value) from None
        return self.choice(data, field, tuple(accelerators), default=default)

    def text(self, data: dict, field: str, *, optional: bool = False, default: Any = ...) -> str | None:
        if field not in data:
            if default is not ...:
                return default
            raise InspectorError(f"{self.source}: missing field '{field}'")
        value = data[field]
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value or len(value) > _MAX_TEXT or "\x00" in value:
            raise self.fail(field, f"a non-empty string of at most {_MAX_TEXT} characters" +
                            (" or null" if optional else ""), value)
        return value

    def choice(self, data: dict, field: str, choices: tuple[str, ...], default: Any = ...) -> str:
        if field not in data and default is not ...:
            return default
        if field not in data:
            raise InspectorError(f"{self.source}: missing field '{field}'")
        value = data[field]
        if value not in choices or not isinstance(value, str):
            raise self.fail(field, "one of " + ", ".join(choices), value)
        return value

    def is_rule(self, value: Any) -> bool:
        """A registered rule's name, or a rule file ``path.py:NAME`` (imported only once trusted)."""
        if not isinstance(value, str) or not value or len(value) > _MAX_TEXT or "\x00" in value:
            return False
        if value in rules:
            return True
        file, _, name = value.rpartition(":")
        return file.endswith(".py") and name.isidentifier()

    def rule(self, data: dict, field: str) -> str:
        if field not in data:
            raise InspectorError(f"{self.source}: missing field '{field}'")
        if not self.is_rule(data[field]):
            raise self.fail(field, "one of " + ", ".join(rules) + ", or a rule file path/to/rules.py:NAME",
                            data[field])
        return data[field]

    def rules(self, data: dict, field: str, *, default: tuple) -> tuple[str, ...]:
        if field not in data:
            return tuple(default)
        value = data[field]
        what = "a non-empty list of rules (" + ", ".join(rules) + ", or path/to/rules.py:NAME)"
        if not isinstance(value, list) or not value or len(value) > 10_000:
            raise self.fail(field, what, value)
        for item in value:
            if not self.is_rule(item):
                raise self.fail(field, what, item)
        return tuple(value)

    def texts(self, data: dict, field: str, *, default: tuple, choices: tuple[str, ...] | None = None,
              nonempty: bool = False, kind: str = "rule names") -> tuple[str, ...]:
        if field not in data:
            return tuple(default)
        value = data[field]
        what = "a list of " + (kind if choices else "strings")
        if not isinstance(value, list) or len(value) > 10_000:
            raise self.fail(field, what, value)
        for item in value:
            if not isinstance(item, str) or not item or len(item) > _MAX_TEXT or (choices and item not in choices):
                raise self.fail(field, what + (f" ({', '.join(choices)})" if choices else ""), item)
        if nonempty and not value:
            raise self.fail(field, "a non-empty " + what, value)
        return tuple(value)

    def steps(self, data: dict, field: str, default: int) -> int:
        value = data.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STEPS:
            raise self.fail(field, f"an integer from 1 to {MAX_STEPS}", value)
        return value

    def results_for(self, value: Any) -> tuple[str, str, tuple[str, ...]]:
        if (not isinstance(value, list) or len(value) != 3 or value[0] not in STAGES or not self.is_rule(value[1])
                or not isinstance(value[2], list) or not all(isinstance(m, str) for m in value[2])):
            raise self.fail("results_for", "[stage, rule, [markers...]]", value)
        return value[0], value[1], tuple(value[2])

    def results(self, value: Any) -> Comparison:
        if not isinstance(value, dict):
            raise self.fail("results", "a saved comparison (an object)", value)
        steps = value.get("steps")
        if isinstance(steps, int) and not isinstance(steps, bool) and not 1 <= steps <= MAX_STEPS:
            # before reading the rest: a variant without metrics makes the reader walk every step
            raise self.fail("results.steps", f"an integer from 1 to {MAX_STEPS}", steps)
        try:
            comparison = Comparison.from_dict(value)
        except InspectorError as exc:
            raise InspectorError(f"{self.source}: field 'results': {exc}") from exc
        except OverflowError:  # an integer too big for a float field (JSON integers have no bound)
            raise InspectorError(f"{self.source}: field 'results' holds a number too large for a float") from None
        for r in comparison.results:
            self.finite(r)
            if not self.is_rule(r.variant.rule.name):
                raise self.fail("results.variants.rule", "one of " + ", ".join(rules) + " or a rule file",
                                r.variant.rule.name)
            steps = {m.step for m in r.metrics}
            if steps and (min(steps) < 0 or max(steps) >= comparison.steps):
                raise InspectorError(f"{self.source}: field 'results': variant {self.show(r.variant.label)} has "
                                     f"metrics for step {max(steps)} of a {comparison.steps}-step run")
        return comparison

    def finite(self, r) -> None:
        """The numbers a saved session writes as plain JSON numbers must be finite, or it could not be saved again."""
        scales = [q.scale for s in r.sites for q in (s.conv_output, s.mul_output) if q is not None]
        for field, values in (("results.variants.sites.scale", scales), ("results.variants.timings", r.timings.values())):
            bad = next((v for v in values if not math.isfinite(v)), None)
            if bad is not None:
                raise self.fail(field, "finite numbers", bad)

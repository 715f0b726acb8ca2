"""``sweep``: a rule change measured over many models, as one table.

The question a reviewer of a fold rule asks is not about one model: *which sites, in which
models, does this rule change, and what does that do to the quantized numbers?* ``sweep`` answers
it. For every model (built-in samples, ``file.py:Class``, ``.pt2`` files, or a TOML file listing
them) it decides every site at every stage under every rule, finds the sites whose decision
differs between the rules, and (with ``steps``) runs each rule's variant on the TOSA INT
reference model.

How it runs:

- one task per model (load, export, stage graphs, decisions; and for comparisons the program
  archive, the calibration and the float reference), then one task per (model, variant), on a
  pool of worker processes (``executor="local"``) or as Ray tasks (``executor="ray"``): the same
  tasks and the same numbers on both, bit for bit. Variants that lead to the same fold decisions
  on a model (the real pass, on the tfa graph the quantizer sees) are run once.
- with ``out=``, every result is written there as it finishes, keyed by what determines it (the
  model's content and fingerprint, the rule's identity: a user's rule by its source). Running the
  same sweep again reads what is done; Ctrl-C stops with everything finished kept; a worker that
  dies (a crash in native code, an out-of-memory kill) loses only its own row, which says why.
- one model that fails to load, export or lower is one row with its one-line error; the sweep
  goes on.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .._workers import pool as _pool
from .._base.hashing import digest
from .._base.limits import check_steps
from .._rules.rules import check_policy, get_policy
from .._numbers.quantization import get_quantization
from .._numbers.results import Variant, json_float
from ..errors import InspectorError, first_line, listing, quoted

FORMATS = ("md", "html", "json", "csv")
GITHUB_COMMENT_LIMIT = 65_536  # characters in one GitHub comment
UNCHANGED_DB = 0.01  # an SQNR difference below this is "unchanged"
# The quantized (TOSA INT) flow folds in the quantizer's transform-for-annotation, before calibration,
# and finds nothing left to fold in lowering: its numbers follow the decisions at this stage only.
NUMBERS_STAGE = "tfa"
FORMAT_VERSION = 1  # of the files in out/

Progress = Callable[["tuple[SweepBar, ...]"], None]


# ---------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelSpec:
    """One model of a sweep, as the user named it."""

    target: str  # what the loader takes: "sample:NAME", "/abs/model.pt2", "/abs/net.py:Net"
    label: str  # how tables show it (as written: relative paths stay relative)
    input_shapes: tuple[tuple[int, ...], ...] | None = None  # seeded random inputs of these shapes
    steps: int | None = None  # this model's steps when the sweep compares (None: the sweep's; 0: never)

    def content_key(self) -> str:
        """What the model's results depend on before it is even loaded: the target, the bytes of its
        file (a sample: its package's sources), the input shapes and the stack's versions. A second
        sweep finds its results in ``out/`` by this key without loading anything."""
        from importlib.metadata import version

        import torch

        from .._base.version import __version__

        return digest(FORMAT_VERSION, self.target, _content_of(self.target), self.input_shapes,
                      torch.__version__, version("executorch"), version("tosa-tools"), __version__)

    def to_dict(self) -> dict:
        return {"target": self.label, "input_shapes": [list(s) for s in self.input_shapes or ()] or None,
                "steps": self.steps}


def _content_of(target: str) -> str:
    """A digest of the bytes a target is built from (edited files give another key)."""
    import inspect

    from .._targets import samples

    if target.startswith("sample:"):
        try:
            entry = samples.entry(target.removeprefix("sample:"))
        except InspectorError:
            return "unknown sample"  # its task says so, in one line
        try:
            folder = Path(inspect.getsourcefile(entry.factory)).parent
            files = sorted(folder.rglob("*.py"))
        except (TypeError, OSError):
            return f"sample without source: {target}"
        return digest(*[(str(f.relative_to(folder)), f.read_bytes()) for f in files])
    file = target.rpartition(":")[0] if ".py:" in target else target
    try:
        return digest(Path(file).read_bytes())
    except OSError:
        return "missing"  # the model's own task reports it, in one line


def models_from(models: Iterable[Any] = (), *, samples: bool = False,
                input_shapes: Sequence[Sequence[int]] | None = None, exclude: Iterable[str] = ()) -> list[ModelSpec]:
    """The models a sweep runs: ``sample:NAME``, ``path/to/file.py:Class``, ``model.pt2``, a TOML file
    listing models (``[[model]]`` tables), ``ModelSpec`` records; ``samples`` adds every built-in sample.
    ``input_shapes`` applies to the targets given here (not to those in TOML files, which say their own).
    ``exclude`` drops models by label or sample name (``--samples --exclude generated_blocks``)."""
    from .._targets import samples as sample_registry

    shapes = _shapes(input_shapes, "input shape") if input_shapes else None
    out: list[ModelSpec] = []
    if isinstance(models, (str, os.PathLike, ModelSpec)):
        models = [models]
    for item in models:
        if isinstance(item, ModelSpec):
            out.append(item)
        elif isinstance(item, (str, os.PathLike)):
            text = os.fspath(item)
            if text.endswith(".toml"):
                out += read_models_toml(text)
            else:
                out.append(_spec(text, text, shapes, None, Path.cwd()))
        else:
            raise InspectorError(f"cannot sweep a {type(item).__name__}; give sample:NAME, path/to/file.py:Class, "
                                 "a .pt2 file or a .toml list (for a model object: torch.export.save it first)")
    if samples:
        out += [ModelSpec(f"sample:{name}", f"sample:{name}") for name in sample_registry.names()]
    excluded = {e.removeprefix("sample:") for e in ([exclude] if isinstance(exclude, str) else exclude)}
    if excluded:
        known = {spec.label for spec in out} | {spec.target.removeprefix("sample:") for spec in out}
        unknown = sorted(e for e in excluded if e not in known and f"sample:{e}" not in known)
        if unknown:
            raise InspectorError(f"cannot exclude {quoted(unknown[0])}: no model of the sweep is called that")
        out = [spec for spec in out if spec.label.removeprefix("sample:") not in excluded
               and spec.target.removeprefix("sample:") not in excluded]
    if not out:
        raise InspectorError("no models to sweep; give targets, a --models FILE.toml, or --samples")
    seen: dict[str, int] = {}
    unique = []
    for spec in out:  # the same label twice (two TOML files, relative names): keep both, tell them apart
        seen[spec.label] = seen.get(spec.label, 0) + 1
        unique.append(spec if seen[spec.label] == 1 else replace(spec, label=f"{spec.label}#{seen[spec.label]}"))
    return unique


_TOML_KEYS = {"target", "input_shape", "input_shapes", "steps", "name"}


def read_models_toml(path: str | os.PathLike) -> list[ModelSpec]:
    """The ``[[model]]`` tables of a TOML file; relative paths are relative to the file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InspectorError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InspectorError(f"cannot read {path}: {first_line(exc)}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InspectorError(f"{path.name} is not valid TOML: {first_line(exc)}") from None
    tables = data.get("model")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise InspectorError(f"{path.name} lists no models; write one [[model]] table per model with target = \"...\"")
    unknown = sorted({k for t in tables for k in t} - _TOML_KEYS) + sorted(set(data) - {"model"})
    if unknown:
        raise InspectorError(f"{path.name}: unknown key {quoted(unknown[0])}; a [[model]] table takes "
                             f"{listing(sorted(_TOML_KEYS))}")
    out = []
    for i, table in enumerate(tables, 1):
        where = f"{path.name}, model {i}"
        target = table.get("target")
        if not isinstance(target, str) or not target.strip():
            raise InspectorError(f"{where}: target must be a string such as \"sample:NAME\" or \"net.py:Net\"")
        shapes = None
        if "input_shape" in table and "input_shapes" in table:
            raise InspectorError(f"{where}: give input_shape or input_shapes, not both")
        if "input_shape" in table:
            shapes = _shapes([table["input_shape"]], f"{where}: input_shape")
        elif "input_shapes" in table:
            shapes = _shapes(table["input_shapes"], f"{where}: input_shapes")
        steps = table.get("steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
            raise InspectorError(f"{where}: steps must be a whole number (0: never compare this model), "
                                 f"got {quoted(steps)}")
        if steps:  # 0: never compare this model (its decisions only)
            check_steps(steps, f"{where}: steps")
        name = table.get("name")
        if name is not None and not isinstance(name, str):
            raise InspectorError(f"{where}: name must be a string")
        out.append(_spec(target, name or target, shapes, steps, path.parent))
    return out


def _spec(target: str, label: str, shapes, steps, root: Path) -> ModelSpec:
    if target.startswith("sample:"):
        return ModelSpec(target, label, shapes, steps)
    if ".py:" in target:
        file, _, cls = target.rpartition(":")
        return ModelSpec(f"{(root / file).resolve()}:{cls}", label, shapes, steps)
    if target.endswith(".pt2"):
        return ModelSpec(str((root / target).resolve()), label, shapes, steps)
    from .._targets import samples

    if target in samples.names():
        return ModelSpec(f"sample:{target}", label, shapes, steps)
    raise InspectorError(f"cannot tell what {quoted(target)} is; give sample:NAME, path/to/file.py:Class or a .pt2 file")


def _shapes(shapes, what: str) -> tuple[tuple[int, ...], ...]:
    try:
        out = tuple(tuple(shape) for shape in shapes)
    except TypeError:
        out = ()
    if not out or any(not s or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in s) for s in out):
        raise InspectorError(f"{what} must be lists of positive integers, e.g. [1, 3, 8, 8]; got {quoted(shapes)}")
    from .._base.limits import check_shape

    for s in out:
        check_shape(s, what)
    return out


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class SweepBar:
    """One phase's progress (the CLI draws one bar per phase)."""

    phase: str  # "models analysed" or "variants compared"
    done: float  # tasks finished (fractions of running ones included)
    total: int  # tasks in this phase
    eta: float | None  # seconds left, estimated from this phase's pace (None: not known yet)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


@dataclass(frozen=True)
class Sweep:
    """What a sweep found: per model, stage and rule the decisions; the sites they differ on; the
    numbers of each variant on the TOSA INT reference model."""

    policies: tuple[str, ...]  # the rules, the first one the baseline deltas are taken against
    stages: tuple[str, ...]  # the stages decided
    steps: int  # recurrent steps compared (0: decisions only)
    models: tuple[dict, ...]  # per model: target, error (None), fingerprint, timings
    rows: tuple[dict, ...]  # per model x stage x rule: sites, folded, skipped, reasons, error
    variants: tuple[dict, ...]  # per model x variant: sqnr_db_last, sqnr_db_worst, ..., error
    executor: str = "local"  # where the tasks ran
    seconds: float = 0.0  # wall time of the call
    reused: int = 0  # results read back from out/ instead of computed
    out: str | None = None  # the folder results were written to
    notes: tuple[str, ...] = ()  # what the user should know about how it ran
    engine: str = "tosa"  # what computed the variants' numbers: "tosa" or "simulation" (_numbers/engines.py)
    # Every site whose decision differs between the rules, per model and stage (derived from rows
    # and variants when the record is made). Only a change at tfa carries SQNR figures: the quantized
    # flow folds there, so a change at aten or edge alone does not reach its numbers.
    changed: tuple[dict, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.changed:
            object.__setattr__(self, "changed", tuple(self._changed_sites()))

    # ------------------------------------------------------------ derived tables

    def _changed_sites(self) -> list[dict]:
        by_model: dict[tuple[str, str], dict[str, dict]] = {}
        for row in self.rows:
            if row.get("error") is None:
                by_model.setdefault((row["target"], row["stage"]), {})[row["policy"]] = row
        sqnr = self._sqnr_by_policy()
        out = []
        for (target, stage), rows in by_model.items():
            if len(rows) < 2:
                continue
            order = [p for p in self.policies if p in rows]
            site_ids = list(dict.fromkeys(s for p in order for s in [*rows[p]["folded"], *rows[p]["skipped"]]))
            for site in site_ids:
                decisions = {p: ("fold" if site in rows[p]["folded"] else "skip" if site in rows[p]["skipped"]
                                 else "absent") for p in order}
                if len(set(decisions.values())) < 2:
                    continue
                where = next((rows[p]["where"].get(site) for p in order if site in rows[p].get("where", {})), {})
                entry = {"target": target, "stage": stage, "site": site, "decisions": decisions,
                         "reasons": {p: rows[p]["reasons"].get(site, []) for p in order},
                         "module": where.get("module", ""), "location": where.get("location", "")}
                if sqnr.get(target) and stage == NUMBERS_STAGE:
                    values = sqnr[target]
                    base = values.get(self.policies[0])
                    entry["sqnr_db_last"] = {p: values.get(p) for p in order}
                    entry["sqnr_delta_db"] = {p: _delta(values.get(p), base) for p in order[1:]}
                out.append(entry)
        return out

    def _sqnr_by_policy(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for v in self.variants:
            if v.get("error") is None and not v.get("markers"):
                out.setdefault(v["target"], {})[v["policy"]] = v["sqnr_db_last"]
        return out

    def summary(self) -> list[str]:
        """One sentence per rule against the baseline: how many sites it changes, in how many models,
        and what that does to the SQNR at the last step."""
        base = self.policies[0]
        k = sum(1 for m in self.models if m.get("error") is None)
        changed = self.changed
        sqnr = self._sqnr_by_policy()
        lines = []
        for policy in self.policies[1:]:
            mine = [c for c in changed if c["decisions"].get(policy) != c["decisions"].get(base)]
            models = sorted({c["target"] for c in mine})
            line = (f"`{policy}` changes {len(mine)} site{'s' * (len(mine) != 1)} in {len(models)} of {k} "
                    f"model{'s' * (k != 1)} against `{base}`")
            if self.steps and NUMBERS_STAGE not in self.stages:
                line += (f"; {NUMBERS_STAGE} was not decided in this sweep, so its changes cannot be tied to the "
                         f"quantized numbers (the quantized flow folds at {NUMBERS_STAGE}: add it to the stages)")
            elif self.steps:
                compared = {t for t, values in sqnr.items() if policy in values and base in values}
                measured = sorted({c["target"] for c in mine if c["stage"] == NUMBERS_STAGE} & compared)
                better = worse = same = 0
                for target in measured:
                    d = _delta(sqnr[target][policy], sqnr[target][base])
                    if d is None:
                        continue
                    if abs(d) < UNCHANGED_DB:
                        same += 1
                    elif d > 0:
                        better += 1
                    else:
                        worse += 1
                if measured:
                    line += (f"; SQNR at the last step, in the models where it changes a {NUMBERS_STAGE} decision "
                             f"(where the quantized flow folds): {better} better / {worse} worse / {same} unchanged")
                at_tfa = {c["target"] for c in mine if c["stage"] == NUMBERS_STAGE}
                elsewhere = sorted(t for t in models if t not in at_tfa and t in compared)
                if elsewhere:
                    where = sorted({c["stage"] for c in mine if c["target"] in elsewhere})
                    line += (f"; in {len(elsewhere)} compared model{'s' * (len(elsewhere) != 1)} it changes decisions "
                             f"at {'/'.join(where)} only, which the quantized flow does not fold at, so its numbers "
                             "there equal the baseline's by construction")
            lines.append(line + ".")
        failed = [m for m in self.models if m.get("error")]
        if failed:
            lines.append(f"{len(failed)} model{'s' * (len(failed) != 1)} could not be analysed (listed below).")
        return lines

    # ------------------------------------------------------------ formats

    def to_dict(self) -> dict:
        """The JSON contract: models, rows, changed, variants (and how the sweep ran)."""
        return _jsonable({
            "policies": list(self.policies), "stages": list(self.stages), "steps": self.steps,
            "engine": self.engine, "models": [dict(m) for m in self.models],
            "rows": [{k: v for k, v in r.items() if k != "where"} for r in self.rows],
            "changed": list(self.changed), "variants": [dict(v) for v in self.variants],
            "summary": self.summary(),
            "run": {"executor": self.executor, "seconds": round(self.seconds, 3), "reused": self.reused,
                    "notes": list(self.notes)},
        })

    def to_json(self) -> str:
        return json.dumps(_redactor().value(self.to_dict()), indent=2, allow_nan=False)

    def to_dataframe(self, kind: str = "rows"):
        """A pandas DataFrame: ``"rows"`` (one per model x stage x rule, with its variant's SQNR),
        ``"changed"`` (one per changed site, with SQNR deltas) or ``"variants"``."""
        import pandas as pd

        if kind == "rows":
            sqnr = {(v["target"], v["policy"]): v for v in self.variants if not v.get("markers")}
            records = []
            for r in self.rows:
                v = sqnr.get((r["target"], r["policy"]), {})
                records.append({"target": r["target"], "stage": r["stage"], "policy": r["policy"],
                                "sites": r.get("sites"), "folded": len(r.get("folded", [])),
                                "skipped": len(r.get("skipped", [])), "error": r.get("error"),
                                "sqnr_db_last": _number(v.get("sqnr_db_last")),
                                "sqnr_db_worst": _number(v.get("sqnr_db_worst"))})
            return pd.DataFrame.from_records(records, columns=["target", "stage", "policy", "sites", "folded",
                                                               "skipped", "error", "sqnr_db_last", "sqnr_db_worst"])
        if kind == "changed":
            records = []
            for c in self.changed:
                record = {"target": c["target"], "stage": c["stage"], "site": c["site"]}
                for p, d in c["decisions"].items():
                    record[f"decision {p}"] = d
                    record[f"reasons {p}"] = ", ".join(c["reasons"].get(p, []))
                for p, v in c.get("sqnr_db_last", {}).items():
                    record[f"sqnr_db {p}"] = v
                for p, v in c.get("sqnr_delta_db", {}).items():
                    record[f"delta_db {p}"] = v
                records.append(record)
            return pd.DataFrame.from_records(records)
        if kind == "variants":
            return pd.DataFrame.from_records([{k: v for k, v in row.items() if k not in ("outputs", "timings")}
                                              for row in self.variants])
        raise InspectorError(f"unknown table {quoted(kind)}; choose rows, changed or variants")

    def to_csv(self) -> str:
        return _redactor()(self.to_dataframe("rows").to_csv(index=False))

    def to_markdown(self, limit: int = GITHUB_COMMENT_LIMIT) -> str:
        """A comment for a pull request: the summary, then the changed sites with their models, reasons
        and SQNR deltas, then every model; within ``limit`` characters (rows left out are counted)."""
        return _redactor()(_markdown(self, limit))

    def to_html(self) -> str:
        """A self-contained HTML page (every model-derived string escaped)."""
        return _redactor(html_text=True)(_html(self))

    def format(self, fmt: str) -> str:
        """The sweep in one of ``FORMATS``."""
        if fmt not in FORMATS:
            raise InspectorError(f"unknown format {quoted(fmt)}; choose one of: {', '.join(FORMATS)}")
        return {"md": self.to_markdown, "html": self.to_html, "json": self.to_json, "csv": self.to_csv}[fmt]()

    def plot(self):
        """A bar per changed site: the SQNR delta of each rule against the baseline (matplotlib)."""
        import matplotlib.pyplot as plt

        changed = [c for c in self.changed if c.get("sqnr_delta_db")]  # tfa changes: the ones with numbers
        fig, ax = plt.subplots(figsize=(8, max(2.0, 0.35 * len(changed) + 1)))
        if not changed:
            ax.text(0.5, 0.5, "no changed site with a comparison", ha="center", va="center")
            ax.set_axis_off()
            return fig
        others = self.policies[1:]
        height = 0.8 / max(1, len(others))
        labels = [f"{c['target']} · {c['stage']} · {c['site'][:40]}" for c in changed]
        for j, policy in enumerate(others):
            values = [_finite(c["sqnr_delta_db"].get(policy)) for c in changed]
            ax.barh([i + j * height for i in range(len(changed))], values, height=height, label=policy)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks([i + height * (len(others) - 1) / 2 for i in range(len(changed))], labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"SQNR at the last step minus {self.policies[0]}'s (dB)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return fig

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/plain": repr(self), "text/html": _html(self, page=False)}

    def __repr__(self) -> str:
        failed = sum(1 for m in self.models if m.get("error"))
        return (f"<Sweep {len(self.models)} models x {len(self.policies)} rules x {len(self.stages)} stages: "
                f"{len(self.changed)} changed sites" + (f", {failed} failed" if failed else "") + ">")


def _delta(value, base):
    if value is None or base is None:
        return None
    value, base = float(value), float(base)
    if math.isinf(value) and math.isinf(base) and value == base:
        return 0.0
    if math.isnan(value) or math.isnan(base):
        return None
    return value - base


def _number(v) -> float:
    """A table cell: a float, NaN where there is no number (pandas keeps the column numeric)."""
    return float("nan") if v is None else float(v)


def _finite(v) -> float:
    if v is None:
        return 0.0
    v = float(v)
    return 0.0 if math.isnan(v) else max(-200.0, min(200.0, v))


def _jsonable(data):
    if isinstance(data, float):
        return json_float(data)
    if isinstance(data, dict):
        return {k: _jsonable(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_jsonable(v) for v in data]
    return data


def _redactor(html_text: bool = False):
    from .._present.report import Redactor

    return Redactor(html=html_text)


def _db(v) -> str:
    if v is None:
        return "–"
    v = float(v)
    return "inf" if math.isinf(v) and v > 0 else "nan" if math.isnan(v) else f"{v:.2f}"


def _signed(v) -> str:
    return "–" if v is None else f"{float(v):+.2f}"


# ---------------------------------------------------------------- Markdown and HTML


def _steps_text(s: Sweep) -> str:
    steps = sorted({v.get("steps", s.steps) for v in s.variants if v.get("steps")}) or [s.steps]
    return f"{steps[0]} step(s)" if len(steps) == 1 else f"{steps[0]} to {steps[-1]} steps (per model)"


def _md(text) -> str:
    from .._present.report import md_code

    return md_code(str(text), cell=True, limit=120)


def _markdown(s: Sweep, limit: int) -> str:
    head = [f"### Fold rules over {len(s.models)} models: " + " vs ".join(f"`{p}`" for p in s.policies),
            "", f"Stages: {', '.join(s.stages)}" + (f"; TOSA INT reference, {_steps_text(s)}." if s.steps else "."),
            "", *[f"- {line}" for line in s.summary()], ""]
    changed = s.changed
    others = s.policies[1:]
    table: list[str] = []
    if changed:
        header = ["model", "stage", "site", *[f"`{p}`" for p in s.policies]]
        if s.steps:
            header += [f"SQNR `{s.policies[0]}`", *[f"Δ dB `{p}`" for p in others]]
        table += ["#### Sites whose decision differs", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        for c in changed:
            cells = [_md(c["target"]), c["stage"], _md(c["site"])]
            for p in s.policies:
                decision = c["decisions"].get(p, "–")
                reasons = c["reasons"].get(p, [])
                cells.append(decision + (f" ({', '.join(reasons)})" if reasons else ""))
            if s.steps:
                cells.append(_db((c.get("sqnr_db_last") or {}).get(s.policies[0])))
                cells += [_signed((c.get("sqnr_delta_db") or {}).get(p)) for p in others]
            table.append("| " + " | ".join(cells) + " |")
    else:
        table += ["No site's decision differs between the rules.", ""]
    models = ["", "#### Models", "", "| model | " + " | ".join(f"folded `{p}`" for p in s.policies)
              + ("".join(f" | SQNR `{p}`" for p in s.policies) if s.steps else "") + " |",
              "|" + "---|" * (1 + len(s.policies) * (2 if s.steps else 1))]
    shown = NUMBERS_STAGE if NUMBERS_STAGE in s.stages else s.stages[-1]
    rows = {(r["target"], r["policy"]): r for r in s.rows if r["stage"] == shown}
    sqnr = s._sqnr_by_policy()
    for m in s.models:
        if m.get("error"):
            models.append(f"| {_md(m['target'])} | failed: {_md(m['error'])} |")
            continue
        cells = [_md(m["target"])]
        for p in s.policies:
            r = rows.get((m["target"], p))
            cells.append("error" if r is None or r.get("error") else f"{len(r['folded'])}/{r['sites']}")
        if s.steps:
            cells += [_db(sqnr.get(m["target"], {}).get(p)) for p in s.policies]
        models.append("| " + " | ".join(cells) + " |")
    models.insert(3, f"Folded sites out of all sites at {shown}" + (
        "; SQNR (dB) at the last step on the TOSA INT reference, whose flow folds at tfa." if s.steps else "."))
    models.insert(4, "")
    failed_variants = [v for v in s.variants if v.get("error")]
    if failed_variants:
        models += ["", "#### Variants that did not run", ""]
        models += [f"- {_md(v['target'])} `{v['variant']}`: {_md(v['error'])}" for v in failed_variants]
    tail = ["", f"<sub>fold-inspector sweep, {s.executor} executor, {s.seconds:.0f} s.</sub>", ""]
    text = "\n".join(head + table + models + tail)
    if len(text) <= limit:
        return text
    # Too long for one comment: keep the summary and as many changed sites as fit.
    note = "\n_{n} more changed site(s) left out to fit one GitHub comment; the JSON (--format json) has them all._\n"
    kept = list(table)
    while len(kept) > 4:
        kept.pop()
        left = len(table) - len(kept)
        text = "\n".join(head + kept) + note.format(n=left) + "\n".join(tail)
        if len(text) <= limit:
            return text
    return "\n".join(head)[: limit - 200] + note.format(n=len(changed)) + "\n".join(tail)


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:.2em .5em;font-size:13px;
text-align:left;vertical-align:top}th{background:#f3f3f3}.fold{color:#1b5e20}.skip{color:#b71c1c}
.better{color:#1b5e20}.worse{color:#b71c1c}code{font-size:12px}"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _html(s: Sweep, page: bool = True) -> str:
    parts = [f"<h2>Fold rules over {len(s.models)} models: {' vs '.join(_e(p) for p in s.policies)}</h2>",
             "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in s.summary()) + "</ul>"]
    changed = s.changed
    if changed:
        head = "".join(f"<th>{_e(p)}</th>" for p in s.policies)
        if s.steps:
            head += f"<th>SQNR {_e(s.policies[0])}</th>" + "".join(f"<th>Δ dB {_e(p)}</th>" for p in s.policies[1:])
        body = []
        for c in changed:
            cells = [f"<td>{_e(c['target'])}</td><td>{_e(c['stage'])}</td><td><code>{_e(c['site'])}</code></td>"]
            for p in s.policies:
                d = c["decisions"].get(p, "–")
                reasons = ", ".join(c["reasons"].get(p, []))
                cells.append(f"<td class='{_e(d)}'>{_e(d)}" + (f"<br><small>{_e(reasons)}</small>" if reasons else "")
                             + "</td>")
            if s.steps:
                cells.append(f"<td>{_e(_db((c.get('sqnr_db_last') or {}).get(s.policies[0])))}</td>")
                for p in s.policies[1:]:
                    d = (c.get("sqnr_delta_db") or {}).get(p)
                    cls = "" if d is None or abs(d) < UNCHANGED_DB else "better" if d > 0 else "worse"
                    cells.append(f"<td class='{cls}'>{_e(_signed(d))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("<h3>Sites whose decision differs</h3><table><tr><th>model</th><th>stage</th><th>site</th>"
                     f"{head}</tr>{''.join(body)}</table>")
    else:
        parts.append("<p>No site's decision differs between the rules.</p>")
    rows = []
    sqnr = s._sqnr_by_policy()
    for r in s.rows:
        v = sqnr.get(r["target"], {}).get(r["policy"])
        status = _e(r["error"]) if r.get("error") else f"{len(r['folded'])} folded / {r['sites']} sites"
        rows.append(f"<tr><td>{_e(r['target'])}</td><td>{_e(r['stage'])}</td><td>{_e(r['policy'])}</td>"
                    f"<td>{status}</td>" + (f"<td>{_e(_db(v))}</td>" if s.steps else "") + "</tr>")
    failed = [m for m in s.models if m.get("error")]
    rows += [f"<tr><td>{_e(m['target'])}</td><td colspan='4'>failed: {_e(m['error'])}</td></tr>" for m in failed]
    parts.append("<h3>Every model, stage and rule</h3><table><tr><th>model</th><th>stage</th><th>rule</th>"
                 "<th>decisions</th>" + ("<th>SQNR (dB, last step)</th>" if s.steps else "") + "</tr>"
                 + "".join(rows) + "</table>")
    bad = [v for v in s.variants if v.get("error")]
    if bad:
        parts.append("<h3>Variants that did not run</h3><ul>" + "".join(
            f"<li>{_e(v['target'])} <code>{_e(v['variant'])}</code>: {_e(v['error'])}</li>" for v in bad) + "</ul>")
    parts.append(f"<p><small>fold-inspector sweep, {_e(s.executor)} executor, {s.seconds:.0f} s.</small></p>")
    inner = "\n".join(parts)
    if not page:
        return f"<div class='fi-sweep'><style>{_CSS}</style>{inner}</div>"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>fold-inspector sweep</title>"
            f"<style>{_CSS}</style></head><body>{inner}</body></html>")


# ---------------------------------------------------------------- the results folder


class _Store:
    """Results as files under ``out/``, written as they finish (atomically: a temporary file renamed)."""

    def __init__(self, out: str | os.PathLike | None) -> None:
        self.root = Path(out) if out is not None else None
        if self.root is not None:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InspectorError(f"cannot create the results folder {out}: {exc.strerror or exc}") from None

    def _path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def read(self, *parts: str) -> dict | None:
        if self.root is None:
            return None
        path = self._path(*parts)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # a damaged file is computed again
        return data if isinstance(data, dict) and data.get("format") == FORMAT_VERSION else None

    def write(self, data: dict, *parts: str) -> None:
        if self.root is None:
            return
        from .._base.files import write_text

        path = self._path(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(_jsonable({**data, "format": FORMAT_VERSION}), allow_nan=False))


def _rule_key(policy: str) -> str:
    from .._rules.rules import rule_identity

    return rule_identity(policy)


def _variant_key(variant: Variant, steps: int) -> str:
    quantization = variant.quantization or "a8w8"
    if quantization == "a8w8" and not variant.overrides:  # the key files written before quantizations had
        return digest(get_policy(variant.policy).identity, variant.markers, steps, "default quantization")[:24]
    identity = get_quantization(quantization).identity
    return digest(get_policy(variant.policy).identity, variant.markers, steps, identity, variant.overrides)[:24]


# ---------------------------------------------------------------- the sweep


def sweep(
    models: Iterable[Any] = (),
    policies: Sequence[Any] = ("upstream", "state-aware"),
    stages: Sequence[str] = ("tfa",),
    steps: int = 0,
    variants: Sequence[Any] | None = None,
    workers: int | None = None,
    executor: str = "local",
    out: str | os.PathLike | None = None,
    *,
    samples: bool = False,
    exclude: Iterable[str] = (),
    input_shapes: Sequence[Sequence[int]] | None = None,
    ray_address: str | None = None,
    progress: Progress | None = None,
    engine: str = "tosa",
) -> Sweep:
    """Decide every site of every model at every stage under every rule; with ``steps > 0``, also
    run each rule (or each of ``variants``) on the TOSA INT reference model for ``steps`` steps.

    ``models``: ``sample:NAME``, ``path/to/file.py:Class``, ``model.pt2``, a ``.toml`` list, or
    ``ModelSpec``; ``samples=True`` adds every built-in sample; ``exclude`` drops models by name. ``policies``: rule names,
    ``path/to/rules.py:NAME`` or ``Policy`` objects; the first is the baseline. ``workers``: worker
    processes (default: the cores available). ``executor``: ``"local"`` or ``"ray"``
    (``ray_address``: a running cluster; default: a local one). ``out``: a folder where each result
    is written as it finishes and read back by the next sweep. ``progress(bars)`` receives one
    ``SweepBar`` per phase as the work advances. ``engine="simulation"`` computes the variants'
    numbers on the quantize/dequantize simulation instead of the TOSA reference (no lowering; each
    variant row and the record say so, and a note what the simulation cannot show).
    """
    from .._numbers.compare import variants_of, workers_of
    from .._numbers.engines import SIMULATION_NOTE, TOSA, check_engine

    engine = check_engine(engine)

    t_start = time.perf_counter()
    specs = models_from(models, samples=samples, input_shapes=input_shapes, exclude=exclude)
    rules = _rules(policies)
    stage_list = _stage_list(stages)
    if steps:
        check_steps(steps)
    compare_variants = variants_of(variants, None) if variants is not None else [Variant(p) for p in rules]
    if not steps and variants is not None:
        raise InspectorError("variants are compared on the TOSA reference: give steps >= 1 (--steps N or --compare)")
    n_workers = workers_of(workers)
    if executor not in _pool.EXECUTORS:
        raise InspectorError(f"unknown executor {quoted(executor)}; choose one of: {', '.join(_pool.EXECUTORS)}")
    store = _Store(out)
    origins = _origins([*rules, *(v.policy for v in compare_variants)])
    notes = []
    local_only = [name for name, origin, _ in origins if get_policy(name).is_users and not origin]
    if local_only:
        notes.append(f"rule {listing(local_only)} lives in this process only (not in a file), so every task ran "
                     "here, one after another: save it in a file and name it path/to/rules.py:NAME to use workers")
    state = _State(specs, rules, stage_list, steps, compare_variants, store, progress)
    state.engine = engine
    if steps and engine != TOSA:
        notes.append(SIMULATION_NOTE)
    for spec in specs:
        state.plan(spec)
    if state.pending_models:
        with _pool.pool_for(executor, n_workers, ray_address, inline=bool(local_only)) as pool:
            state.run(pool, origins)
    notes += state.notes
    cached = sum(1 for v in state.results.values() if v.get("cached"))
    if cached:
        notes.append(f"{cached} variant{'s' * (cached != 1)} answered by warm worker processes from an earlier sweep "
                     "of the same model (same numbers, no time spent); inspector.clear_cache() stops those workers")
    return Sweep(tuple(rules), tuple(stage_list), steps, tuple(state.model_rows()), tuple(state.rows_in_order()),
                 tuple(state.variants_in_order()), executor="inline" if local_only else executor,
                 seconds=time.perf_counter() - t_start, reused=state.reused,
                 out=str(store.root) if store.root else None, notes=tuple(notes), engine=engine)


def _rules(policies) -> list[str]:
    from .._rules.rules import Policy, register

    if isinstance(policies, (str, Policy)):
        policies = [p.strip() for p in policies.split(",")] if isinstance(policies, str) else [policies]
    names = []
    for p in policies:
        if isinstance(p, Policy):
            names.append(register(p, replace=True).name)
        elif isinstance(p, str) and p.strip():
            names.append(check_policy(p.strip()))
        else:
            raise InspectorError(f"cannot read rule {quoted(p)}; give rule names such as upstream,state-aware")
    if not names:
        raise InspectorError("no rules to sweep; give at least one, e.g. --policies upstream,state-aware")
    return list(dict.fromkeys(names))


def _stage_list(stages) -> list[str]:
    from .._decide.stages import check_stage

    if isinstance(stages, str):
        stages = [s.strip() for s in stages.split(",") if s.strip()]
    out = [check_stage(s) for s in stages]
    if not out:
        raise InspectorError("no stages to sweep; give at least one of aten, tfa, edge")
    return list(dict.fromkeys(out))


def _origins(names) -> list[tuple[str, str, str]]:
    """What a worker needs to know each rule as this process does: name, file (if any), identity."""
    from .._rules.rules import rule_origins

    return rule_origins(names)


@dataclass
class _Phase:
    name: str
    total: int = 0
    done: int = 0
    running: dict = field(default_factory=dict)  # key -> fraction
    started: float | None = None

    def bar(self) -> SweepBar:
        done = self.done + sum(self.running.values())
        eta = None
        if self.started is not None and done > 0 and self.total:
            elapsed = time.perf_counter() - self.started
            eta = max(0.0, elapsed * (self.total - done) / done)
        return SweepBar(self.name, done, self.total, eta)


class _State:
    """The scheduler's book: what each model needs, what is done, what is written."""

    def __init__(self, specs, rules, stages, steps, variants, store: _Store, progress) -> None:
        self.specs, self.rules, self.stages, self.steps = specs, rules, stages, steps
        self.variants = variants
        self.store, self.progress = store, progress
        self.models: dict[str, dict] = {}  # label -> model record
        self.rows: dict[tuple, dict] = {}  # (label, stage, policy) -> row
        self.results: dict[tuple, dict] = {}  # (label, variant label) -> variant row
        self.pending_models: list[ModelSpec] = []
        self.keys: dict[str, str] = {}  # label -> content key
        self.reused = 0
        self.notes: list[str] = []
        self.analysed = _Phase("models analysed")
        self.compared = _Phase("variants compared")
        self.waiting: dict[str, list] = {}  # label -> variant groups in flight
        self.need: dict[str, tuple] = {}  # label -> (rows, variants) still to compute
        self.origins: list = []
        self.engine = "tosa"  # what computes the variants' numbers (part of their keys in out/)

    # ------------------------------------------------------------ what is already done

    def _steps_of(self, spec: ModelSpec) -> int:
        return spec.steps if (spec.steps is not None and self.steps) else self.steps

    def _variants_for(self, spec: ModelSpec) -> list:
        return list(self.variants) if self._steps_of(spec) else []

    def plan(self, spec: ModelSpec) -> None:
        key = spec.content_key()
        self.keys[spec.label] = key
        record = self.store.read("models", f"{key}.json")
        if record is not None and record.get("error"):
            self.models[spec.label] = {"target": spec.label, "error": record["error"],
                                       "fingerprint": None, "timings": {}}
            self.reused += 1
            return
        missing_rows = list(self._all_rows(spec))
        missing_variants = self._variants_for(spec)
        if record is not None:
            fingerprint = record["fingerprint"]
            found = []
            for stage, policy in missing_rows:
                row = self.store.read("rows", fingerprint, f"{stage}.{_rule_key(policy)}.json")
                if row is not None:
                    self.rows[(spec.label, stage, policy)] = {**row["row"], "target": spec.label, "policy": policy}
                    found.append((stage, policy))
            missing_rows = [pair for pair in missing_rows if pair not in found]
            still = []
            for v in missing_variants:
                got = self.store.read("variants", fingerprint, f"{self._variant_file(v, spec)}.json")
                if got is not None:
                    self.results[(spec.label, v.label)] = {"engine": self.engine, **got["variant"],
                                                            "target": spec.label, "variant": v.label,
                                                            "policy": v.policy}
                else:
                    still.append(v)
            missing_variants = still
            self.reused += len(found) + len(self._variants_for(spec)) - len(missing_variants)
            self.models[spec.label] = {"target": spec.label, "error": None, "fingerprint": fingerprint,
                                       "timings": record.get("timings", {})}
            if not missing_rows and not missing_variants:
                return
        self.pending_models.append(spec)
        self.need[spec.label] = (missing_rows, missing_variants)

    def _all_rows(self, spec):
        for stage in self.stages:
            for policy in self.rules:
                yield stage, policy

    # ------------------------------------------------------------ running

    def run(self, pool, origins) -> None:
        self.analysed.total = len(self.pending_models)
        self.compared.total = sum(len(self.need[s.label][1]) for s in self.pending_models)
        self.analysed.started = time.perf_counter()
        for spec in self.pending_models:
            rows, variants = self.need[spec.label]
            payload = {"spec": {"target": spec.target, "label": spec.label,
                                "input_shapes": [list(s) for s in spec.input_shapes] if spec.input_shapes else None},
                       "rules": origins, "need": rows,
                       "compare": ({"steps": self._steps_of(spec),
                                    "variants": {v.label: v for v in variants}, "engine": self.engine}
                                   if variants else None)}
            # Models first, in the order given (each is short), so that every variant is known early ...
            pool.submit(("model", spec.label), "inspector._sweep.work:prepare_model", payload, priority=0)
        self._report()
        self.origins = origins
        specs = {s.label: s for s in self.pending_models}
        for event in pool.events():
            kind, (task, label, *rest) = event[0], event[1]
            spec = specs[label]
            phase = self.analysed if task == "model" else self.compared
            if kind == "progress":
                phase.running[event[1]] = float(event[3])
                self._report()
                continue
            phase.running.pop(event[1], None)
            if task == "model":
                phase.done += 1
                self._model_done(pool, spec, kind, event[2:])
            else:
                self._variant_done(spec, rest[0], kind, event[2:])
            self._report()

    def _report(self) -> None:
        if self.progress is not None:
            bars = (self.analysed.bar(),) + ((self.compared.bar(),) if self.compared.total else ())
            self.progress(bars)

    def _model_done(self, pool, spec: ModelSpec, kind: str, rest) -> None:
        rows, variants = self.need[spec.label]
        if kind != "done":
            message = rest[0] if kind == "error" else f"the worker analysing {spec.label} died: {rest[0]}"
            message = " ".join(str(message).split())
            self.models[spec.label] = {"target": spec.label, "error": message, "fingerprint": None, "timings": {}}
            if kind == "error":  # the model's own failure: the same next time
                self.store.write({"target": spec.label, "error": message}, "models", f"{self.keys[spec.label]}.json")
            self.compared.total -= len(variants)
            return
        value = rest[0]
        fingerprint = value["fingerprint"]
        self.models[spec.label] = {"target": spec.label, "error": None, "fingerprint": fingerprint,
                                   "timings": value["timings"]}
        for row in value["rows"]:
            row = {**row, "target": spec.label}
            row.setdefault("sites", None)
            row.setdefault("folded", [])
            row.setdefault("skipped", [])
            row.setdefault("reasons", {})
            self.rows[(spec.label, row["stage"], row["policy"])] = row
            if row.get("error") is None:
                self.store.write({"row": row}, "rows", fingerprint, f"{row['stage']}.{_rule_key(row['policy'])}.json")
        self.store.write({"target": spec.label, "error": None, "fingerprint": fingerprint,
                          "timings": value["timings"]}, "models", f"{self.keys[spec.label]}.json")
        if not variants:
            return
        prepared = value["compare"]
        if prepared is None:
            for v in variants:
                self._put_variant(spec, v, {"error": value["compare_error"]}, write=True)
            self.compared.total -= len(variants)
            return
        groups: dict[Any, list[Variant]] = {}
        for v in variants:
            key = prepared["decisions"].get(v.label)
            groups.setdefault(key if key is not None else ("alone", v.label), []).append(v)
        model = {k: prepared[k] for k in ("program", "name", "source", "inputs", "recurrent", "key", "calibration",
                                          "steps", "reference", "base_key", "engine")}
        if self.compared.started is None:
            self.compared.started = time.perf_counter()
        for members in groups.values():
            first = members[0]
            self.waiting.setdefault(spec.label, []).append(members)
            pool.submit(("variant", spec.label, first.label), "inspector._sweep.work:run_variant",
                        {"model": model, "variant": first, "rules": self.origins},
                        # ... then the variants, biggest program first: the last to finish are short ones,
                        # so no worker idles at the end while another lowers a big model.
                        priority=1 + 1 / (1 + prepared.get("nodes", 0)))
            self.compared.total -= len(members) - 1  # the others share its result

    def _variant_done(self, spec: ModelSpec, first_label: str, kind: str, rest) -> None:
        groups = self.waiting.get(spec.label, [])
        members = next(g for g in groups if g[0].label == first_label)
        groups.remove(members)
        self.compared.done += 1
        if kind == "done":
            for i, v in enumerate(members):
                data = {**rest[0], "error": None, "shared_with": None if i == 0 else members[0].label}
                if i:
                    data["timings"] = {}  # it cost nothing: its numbers are the first member's
                self._put_variant(spec, v, data, write=True)
            return
        if kind == "error":
            message, write = " ".join(str(rest[0]).split()), True
        else:
            message, write = (f"the worker running {spec.label} / {first_label} died: {rest[0]}; the other results "
                              "are kept; run this model alone (python -m inspector compare ...) to see more"), False
        for v in members:
            self._put_variant(spec, v, {"error": message}, write=write)

    def _put_variant(self, spec: ModelSpec, v: Variant, data: dict, write: bool) -> None:
        row = {"target": spec.label, "stage": "tfa", "engine": self.engine, "variant": v.label, "policy": v.policy,
               "markers": list(v.markers), "quantization": v.quantization or "a8w8",
               "overrides": dict(v.overrides), "steps": self._steps_of(spec), "sqnr_db_last": None,
               "sqnr_db_worst": None, **data}
        self.results[(spec.label, v.label)] = row
        fingerprint = self.models.get(spec.label, {}).get("fingerprint")
        if write and fingerprint:
            stored = {k: val for k, val in row.items() if k not in ("target",)}
            self.store.write({"variant": stored}, "variants", fingerprint, f"{self._variant_file(v, spec)}.json")

    def _variant_file(self, v: Variant, spec: ModelSpec) -> str:
        """A variant's file name in out/: a simulated result never answers for TOSA (whose names stay
        as they were written before engines existed)."""
        key = _variant_key(v, self._steps_of(spec))
        return key if self.engine == "tosa" else f"{key}.{self.engine}"

    # ------------------------------------------------------------ the tables, in the order asked

    def model_rows(self) -> list[dict]:
        return [self.models.get(s.label, {"target": s.label, "error": "not run (interrupted)", "fingerprint": None,
                                          "timings": {}}) for s in self.specs]

    def rows_in_order(self) -> list[dict]:
        out = []
        for s in self.specs:
            if self.models.get(s.label, {}).get("error"):
                continue
            for stage in self.stages:
                for policy in self.rules:
                    row = self.rows.get((s.label, stage, policy))
                    if row is not None:
                        out.append(row)
        return out

    def variants_in_order(self) -> list[dict]:
        out = []
        for s in self.specs:
            for v in self._variants_for(s):
                row = self.results.get((s.label, v.label))
                if row is not None:
                    out.append(row)
        return out


__all__ = ["sweep", "Sweep", "ModelSpec", "SweepBar", "models_from", "read_models_toml", "FORMATS"]

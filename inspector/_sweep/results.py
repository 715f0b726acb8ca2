"""``Sweep``: the record a sweep returns, its derived tables and its JSON."""

from __future__ import annotations

from dataclasses import dataclass

from .._base.data import FORMAT, jsonable
from .._base.formats import GITHUB_COMMENT_LIMIT
from .._base.errors import InspectorError, quoted
from .records import (NUMBERS_STAGE, UNCHANGED_DB, ChangedSite, SweepModel, SweepRow, SweepVariant, changed_sites,
                      compilers, costed_accelerator, cycles_by_rule, sqnr_by_rule, sqnr_delta, table_number)
from .._base.formats import cycles
from .._base.display import draw
from .._cost.accelerators import TOSA_INT, Accelerator, accelerator_named
from .._numbers.engines import TOSA, Engine, engine_of


# The formats a sweep is written in (``Sweep.format``; the presentation, ``present/sweep.py``, writes each).
FORMATS = ("md", "html", "json", "csv")


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """What a sweep found: per model, stage and rule the decisions; the sites they differ on; the
    numbers of each variant on the TOSA INT reference model."""

    FORMATS = FORMATS  # the formats a sweep is written in: md, html, json, csv
    NUMBERS_STAGE = NUMBERS_STAGE  # the stage whose decisions the quantized numbers follow
    UNCHANGED_DB = UNCHANGED_DB  # an SQNR difference below this is "unchanged"

    rules: tuple[str, ...]  # the rules, the first one the baseline deltas are taken against
    stages: tuple[str, ...]  # the stages decided
    steps: int  # recurrent steps compared (0: decisions only)
    models: tuple[SweepModel, ...]  # per model: target, error (None), fingerprint, timings
    rows: tuple[SweepRow, ...]  # per model x stage x rule: sites, folded, skipped, reasons, error
    variants: tuple[SweepVariant, ...]  # per model x variant: sqnr_db_last, sqnr_db_worst, ..., error
    executor: str = "local"  # where the tasks ran
    seconds: float = 0.0  # wall time of the call
    reused: int = 0  # results read back from the result store instead of computed
    out: str | None = None  # the folder of the store results were kept in, when out= named one
    notes: tuple[str, ...] = ()  # what the user should know about how it ran
    engine: Engine = TOSA  # what computed the variants' numbers: the TOSA reference or the simulation (engines.py)
    accelerators: tuple[Accelerator, ...] = (TOSA_INT,)  # what the variants were lowered for, each variant on each
    advice: tuple = ()  # with advise_db: per model and Ethos-U, which sites should fold (``inspector.Advice``)

    def __post_init__(self) -> None:  # names given here are looked up once
        object.__setattr__(self, "engine", engine_of(self.engine))
        object.__setattr__(self, "accelerators", tuple(accelerator_named(a) for a in self.accelerators))

    @property
    def changed(self) -> tuple[ChangedSite, ...]:
        """Every site whose decision differs between the rules, per model and stage (derived from
        rows and variants). Only a change at tfa carries SQNR figures: the quantized flow folds
        there, so a change at aten or edge alone does not reach its numbers."""
        return changed_sites(self.rules, self.rows, self.variants)

    def summary(self) -> list[str]:
        """One sentence per rule against the baseline: how many sites it changes, in how many models,
        and what that does to the SQNR at the last step."""
        base = self.rules[0]
        k = sum(1 for m in self.models if m.error is None)
        changed = self.changed
        sqnr = sqnr_by_rule(self.variants, self.accelerators[0])
        priced = costed_accelerator(self.variants)
        spent = cycles_by_rule(self.variants, priced) if priced else {}
        lines = []
        for rule in self.rules[1:]:
            mine = [c for c in changed if c.decisions.get(rule) != c.decisions.get(base)]
            models = sorted({c.target for c in mine})
            line = (f"`{rule}` changes {len(mine)} site{'s' * (len(mine) != 1)} in {len(models)} of {k} "
                    f"model{'s' * (k != 1)} against `{base}`")
            if self.steps and NUMBERS_STAGE not in self.stages:
                line += (f"; {NUMBERS_STAGE} was not decided in this sweep, so its changes cannot be tied to the "
                         f"quantized numbers (the quantized flow folds at {NUMBERS_STAGE}: add it to the stages)")
            elif self.steps:
                compared = {t for t, values in sqnr.items() if rule in values and base in values}
                measured = sorted({c.target for c in mine if c.stage == NUMBERS_STAGE} & compared)
                better = worse = same = 0
                for target in measured:
                    d = sqnr_delta(sqnr[target][rule], sqnr[target][base])
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
                at_tfa = {c.target for c in mine if c.stage == NUMBERS_STAGE}
                elsewhere = sorted(t for t in models if t not in at_tfa and t in compared)
                if elsewhere:
                    where = sorted({c.stage for c in mine if c.target in elsewhere})
                    line += (f"; in {len(elsewhere)} compared model{'s' * (len(elsewhere) != 1)} it changes decisions "
                             f"at {'/'.join(where)} only, which the quantized flow does not fold at, so its numbers "
                             "there equal the baseline's by construction")
                priced_models = [t for t in spent if rule in spent[t] and base in spent[t]]
                if priced_models:
                    more = sum(spent[t][rule] - spent[t][base] for t in priced_models)
                    line += (f"; on {priced} it {'costs' if more >= 0 else 'saves'} {cycles(abs(more))} cycles in all "
                             f"over {len(priced_models)} model{'s' * (len(priced_models) != 1)} (Vela's estimate; "
                             f"{compilers(self.variants)[priced]})")
            lines.append(line + ".")
        failed = [m for m in self.models if m.error]
        if failed:
            lines.append(f"{len(failed)} model{'s' * (len(failed) != 1)} could not be analysed (listed below).")
        return lines

    # ------------------------------------------------------------ formats

    # Written by hand: the sweep's JSON contract is a report, not its fields: the changed sites and the summary
    # computed for readers, how it ran grouped under "run" (seconds rounded); it is never read back as a Sweep.
    def to_dict(self) -> dict:
        """The JSON contract: models, rows, changed, variants (and how the sweep ran)."""
        return jsonable({
            "format": FORMAT, "rules": list(self.rules), "accelerators": [a.name for a in self.accelerators],
            "stages": list(self.stages), "steps": self.steps,
            "engine": self.engine.name, "models": [m.to_dict() for m in self.models],
            "rows": [r.to_dict() for r in self.rows],
            "changed": [c.to_dict() for c in self.changed], "variants": [v.to_dict() for v in self.variants],
            "summary": self.summary(),
            **({"advice": [a.to_dict() for a in self.advice]} if self.advice else {}),
            "run": {"executor": self.executor, "seconds": round(self.seconds, 3), "reused": self.reused,
                    "notes": list(self.notes)},
        })

    def to_json(self) -> str:
        """``to_dict()`` as JSON text, local paths redacted."""
        return draw("sweep_json", self)

    def to_dataframe(self, kind: str = "rows"):
        """A pandas DataFrame: ``"rows"`` (one per model x stage x rule, with its variant's SQNR),
        ``"changed"`` (one per changed site, with SQNR deltas) or ``"variants"``. A table with cycles has a
        ``compiler`` column: the settings they were made under."""
        import pandas as pd  # lazy: pandas is only for the notebook user's tables

        if kind == "rows":
            first = self.accelerators[0]
            sqnr = {(v.target, v.rule): v for v in self.variants if not v.markers and v.accelerator == first}
            records = []
            for r in self.rows:
                v = sqnr.get((r.target, r.rule))
                records.append({"target": r.target, "stage": r.stage, "rule": r.rule, "sites": r.sites,
                                "folded": len(r.folded), "skipped": len(r.skipped), "error": r.error,
                                "sqnr_db_last": table_number(v.sqnr_db_last if v else None),
                                "sqnr_db_worst": table_number(v.sqnr_db_worst if v else None),
                                "cycles": table_number(v.cycles if v else None),
                                "compiler": v.compiler if v and v.cycles is not None else None})
            return pd.DataFrame.from_records(records, columns=["target", "stage", "rule", "sites", "folded", "skipped",
                                                               "error", "sqnr_db_last", "sqnr_db_worst", "cycles",
                                                               "compiler"])
        if kind == "changed":
            priced = costed_accelerator(self.variants)  # the accelerator the changes are priced on (the first)
            priced_with = compilers(self.variants).get(priced) if priced else None
            records = []
            for c in self.changed:
                record = {"target": c.target, "stage": c.stage, "site": c.site}
                for p, d in c.decisions.items():
                    record[f"decision {p}"] = d
                    record[f"reasons {p}"] = ", ".join(c.reasons.get(p, []))
                for p, v in (c.sqnr_db_last or {}).items():
                    record[f"sqnr_db {p}"] = v
                for p, v in (c.sqnr_delta_db or {}).items():
                    record[f"delta_db {p}"] = v
                for p, v in (c.cycles_delta or {}).items():
                    record[f"delta_cycles {p}"] = v
                if c.cycles_delta is not None:
                    record["compiler"] = priced_with
                records.append(record)
            return pd.DataFrame.from_records(records)
        if kind == "variants":
            return pd.DataFrame.from_records([{k: v for k, v in row.to_dict().items()
                                               if k not in ("outputs", "timings")} for row in self.variants])
        raise InspectorError(f"unknown table {quoted(kind)}; choose rows, changed or variants")

    def to_csv(self) -> str:
        """One line per model x stage x rule (the ``rows`` table), local paths redacted."""
        return draw("sweep_csv", self)

    def to_markdown(self, limit: int = GITHUB_COMMENT_LIMIT) -> str:
        """A comment for a pull request: the summary, then the changed sites with their models, reasons
        and SQNR deltas, then every model; within ``limit`` characters (rows left out are counted)."""
        return draw("sweep_markdown", self, limit)

    def to_html(self) -> str:
        """A self-contained HTML page (every model-derived string escaped)."""
        return draw("sweep_page", self)

    def format(self, fmt: str) -> str:
        """The sweep in one of ``FORMATS``."""
        return draw("sweep_format", self, fmt)

    def plot(self):
        """A bar per changed site: the SQNR delta of each rule against the baseline (matplotlib)."""
        return draw("plot", self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        failed = sum(1 for m in self.models if m.error)
        return (f"<Sweep {len(self.models)} models x {len(self.rules)} rules x {len(self.stages)} stages: "
                f"{len(self.changed)} changed sites" + (f", {failed} failed" if failed else "") + ">")



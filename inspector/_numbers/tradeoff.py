"""What the fold buys and what it costs, side by side: per variant Vela's cycles beside its dB, and per site
the cycles folding it buys: its rows in the variant that folds nothing (``off``) minus its conv's rows in a
variant that folds it (on the Ethos-U55 its mul's own rows; on the Ethos-U85, where Vela chains the mul into
the conv's operation, only the difference shows it).

A ``Tradeoff`` is read from a ``Comparison`` on an NPU accelerator (``Comparison.tradeoff()``); nothing runs.
The dB of a variant is the worst output's SQNR at the last step (at the worst step too, for recurrent models).
A site whose mul Vela fuses into another operation has no row of its own: its price is then only in the
difference of two variants' totals, and the record says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._base.codec import Record
from .._base.data import dataframe
from .._base.formats import compiler
from .._cost.records import ESTIMATE
from .._cost.accelerators import Accelerator, accelerator_named
from .._base.errors import InspectorError
from .._base.display import draw


@dataclass(frozen=True, kw_only=True)
class VariantTrade(Record):
    """One variant: its cycles and its numbers."""

    label: str  # the variant's label
    rule: str  # its rule's name
    folded: tuple[str, ...]  # the sites it folds
    cycles: int | None  # Vela's total (None: no cost, see the comparison's errors)
    npu_ops: int | None
    sqnr_db: float | None  # the worst output's SQNR at the last step
    worst_db: float | None  # the lowest SQNR of any output at any step
    saved: int | None = None  # cycles it saves against the baseline (off), when there is one
    db_change: float | None = None  # its sqnr_db minus the baseline's


@dataclass(frozen=True, kw_only=True)
class SitePrice(Record):
    """What folding one site buys on the accelerator: its mul's cycles where it is not folded."""

    site: str  # the site id
    bought: int | None  # the cycles of its mul's own rows in the baseline (None: no row of its own)
    how: str  # where the figure comes from, in words
    folded_in: tuple[str, ...]  # the variants that fold it


@dataclass(frozen=True, kw_only=True)
class Tradeoff(Record):
    """Per variant cycles and dB, per site the cycles folding it buys: the fold's price on one accelerator."""

    target: str
    accelerator: Accelerator  # what every variant was lowered for (the comparison's)
    baseline: str | None  # the label of the variant that folds nothing (the site prices are read there)
    variants: tuple[VariantTrade, ...]
    sites: tuple[SitePrice, ...]
    notes: tuple[str, ...] = ()
    # the compiler every cycle here was made under (a cost's own fields; "" where no cost says it)
    vela_version: str = ""
    npu: str = ""
    system_config: str = ""
    memory_mode: str = ""

    # for readers: the compiler line and what the figures are
    json_derived = {"compiler": lambda t: t.compiler, "estimate": lambda t: ESTIMATE}
    json_order = ("target", "accelerator", "baseline", "vela_version", "npu", "system_config", "memory_mode",
                  "compiler", "estimate", "variants", "sites", "notes")

    def __post_init__(self) -> None:
        object.__setattr__(self, "accelerator", accelerator_named(self.accelerator))  # a name: looked up once

    @property
    def compiler(self) -> str:
        """The compiler settings of these cycles in one short line (``Cost.compiler``)."""
        return compiler(self.vela_version, self.npu, self.system_config, self.memory_mode)

    def variant(self, label_or_rule: str) -> VariantTrade:
        for v in self.variants:
            if label_or_rule in (v.label, v.rule):
                return v
        raise InspectorError(f"no variant {label_or_rule!r} in this trade-off")

    def to_dataframe(self, kind: str = "variants"):
        """A pandas DataFrame: ``"variants"`` or ``"sites"`` (the columns of ``to_dict()``'s lists; the variants'
        with a last column ``compiler``, the settings their cycles were made under)."""
        return dataframe(kind, {"variants": lambda: [{**v.to_dict(), "compiler": self.compiler}
                                                     for v in self.variants],
                                "sites": lambda: [s.to_dict() for s in self.sites]})

    def _repr_mimebundle_(self, include=None, exclude=None):
        return draw("bundle", self)

    def __repr__(self) -> str:
        return f"<Tradeoff {self.target} on {self.accelerator}: {len(self.variants)} variants, {len(self.sites)} sites>"


def tradeoff(comparison) -> Tradeoff:
    """The trade-off of ``comparison`` (on an NPU accelerator): cycles beside dB, the price of every site."""
    measured = [r for r in comparison.measured if r.cost is not None]
    if not measured:
        raise InspectorError(f"no variant of this comparison has a cost (accelerator {comparison.accelerator}): "
                             "compare on an Ethos-U, e.g. accelerator='ethos-u55-128', with the TOSA engine")
    base = next((r for r in measured if not any(s.folded_at for s in r.sites)), None)
    notes = []
    if base is None:
        notes.append("no variant folds nothing (add 'off'): no site's price can be read, only the totals")
    last = comparison.steps - 1
    rows = []
    for r in comparison.results:
        if r.error is not None:
            continue
        worst_last = r.worst(last)
        worst_any = r.worst()
        cycles = r.cost.cycles if r.cost is not None else None
        saved = base.cost.cycles - cycles if base is not None and cycles is not None else None
        base_db = base.worst(last).sqnr_db if base is not None else None
        rows.append(VariantTrade(label=r.variant.label, rule=r.variant.rule.name,
                                 folded=tuple(s.site_id for s in r.sites if s.folded_at), cycles=cycles,
                                 npu_ops=r.cost.npu_ops if r.cost is not None else None,
                                 sqnr_db=worst_last.sqnr_db if worst_last else None,
                                 worst_db=worst_any.sqnr_db if worst_any else None,
                                 saved=saved,
                                 db_change=(worst_last.sqnr_db - base_db) if base_db is not None and worst_last else None))
        if r.cost is None and r.cost_error:
            notes.append(r.cost_error)
    site_ids = list(dict.fromkeys(s.site_id for r in comparison.measured for s in r.sites))
    prices = []
    for site in site_ids:
        folded_in = tuple(r.variant.label for r in comparison.measured if any(s.site_id == site and s.folded_at
                                                                               for s in r.sites))
        if base is None:
            prices.append(SitePrice(site=site, bought=None, how="no variant that folds nothing to read it in",
                                    folded_in=folded_in))
            continue
        rows_of_mul = [layer for layer in base.cost.layers if layer.site == site and layer.role == "mul"]
        own = sum(layer.cycles for layer in rows_of_mul)
        saved = _saved_in_own_rows(site, base, [r for r in measured if r.variant.label in folded_in])
        if saved is not None and saved[0] != own:
            prices.append(SitePrice(site=site, bought=saved[0],
                                    how=f"its conv's and mul's rows in {base.variant.label} minus its "
                                                    f"conv's rows in {saved[1]}, which folds it (its mul's own rows: "
                                                    f"{own:,} cycles; Vela chains the mul into the conv's operation)",
                                    folded_in=folded_in))
        elif rows_of_mul:
            same = f" (its conv's rows are the same in {saved[1]}, which folds it)" if saved is not None else ""
            prices.append(SitePrice(site=site, bought=own,
                                    how=f"its mul's {len(rows_of_mul)} row(s) in {base.variant.label}{same}",
                                    folded_in=folded_in))
        else:
            prices.append(SitePrice(site=site, bought=None,
                                    how=f"its mul has no row of its own in {base.variant.label} (Vela fused "
                                                "it into another operation): only the variants' totals show its "
                                                "price", folded_in=folded_in))
    said = (base or measured[0]).cost  # every variant was compiled under the same settings
    return Tradeoff(target=comparison.target, accelerator=comparison.accelerator,
                    baseline=base.variant.label if base is not None else None,
                    variants=tuple(rows), sites=tuple(prices),
                    notes=tuple(dict.fromkeys(notes + list(base.cost.notes if base else ()))),
                    vela_version=said.vela_version, npu=said.npu, system_config=said.system_config, memory_mode=said.memory_mode)


def _saved_in_own_rows(site: str, base, folding) -> tuple[int, str] | None:
    """(cycles, variant label): what folding ``site`` saves in its own rows: its conv's and mul's rows in ``base``
    minus its conv's rows in the first variant of ``folding`` that has them. On the Ethos-U55 that is its mul's
    rows; on the Ethos-U85 Vela chains the mul into the conv's operation (the mul's row shows 0 or a few cycles
    and the work is in the conv's row), so only the difference shows it. None: no such rows."""
    mine = [layer for layer in base.cost.layers if layer.site == site]
    if not any(layer.role == "conv" for layer in mine):
        return None
    for r in folding:
        if r.cost is None:
            continue
        conv = [layer for layer in r.cost.layers if layer.site == site and layer.role == "conv"]
        if conv:
            return sum(layer.cycles for layer in mine) - sum(layer.cycles for layer in conv), r.variant.label
    return None


__all__ = ["SitePrice", "Tradeoff", "VariantTrade", "tradeoff"]

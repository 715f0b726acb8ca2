"""The site table: one row per conv->mul site (select button, decision and reasons, marker checkbox)."""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

import inspector
from inspector import present

HEADER = ("<div style='display:grid;grid-template-columns:260px 90px 1fr 120px;font-weight:600'>"
          "<span>site</span><span>decision</span><span>reasons / risks / scale</span><span>carried state</span></div>")


class SiteTable:
    """Owns ``sites_box`` and its rows. Rows are reused (updated in place) while the set of sites is
    the same; the CSS classes each row was given are recorded here, so they are changed with the
    public ``add_class``/``remove_class`` only."""

    exposed = ("sites_box",)

    def __init__(self, *, on_select: Callable[[str], None], on_marker: Callable[[str, dict], None]) -> None:
        self.sites_box = W.VBox().add_class("fi-site-table")
        self._on_select, self._on_marker = on_select, on_marker
        self._row_ids: list[str] | None = None  # the sites the rows were built for (None: not yet)
        self._rows: dict[str, W.HBox] = {}
        self._classes: dict[str, set[str]] = {}  # the CSS classes each row has now
        self._shown: dict[str, tuple] = {}  # site id -> (site, marked, selected) its row shows now
        self._where: tuple = (None, {}, {})  # (comparison, its folded_where(), its site prices) the rows show
        self._header = W.HTML(HEADER)  # with the compiler the prices were made under, when they are shown

    def render(self, analysis: inspector.Analysis, comparison, selected: str | None) -> None:
        ids = [s.id for s in analysis.sites]
        if ids != self._row_ids:
            self._rows = {sid: self._make_row(sid) for sid in ids}
            self._classes = {sid: {"fi-site-row"} for sid in ids}
            self._shown = {}
            self._row_ids = ids
            empty = [W.HTML("<i>no conv-&gt;mul sites in this model</i>")] if not ids else []
            self.sites_box.children = [self._header, *self._rows.values(), *empty]
        if self._where[0] is not comparison:  # other results: every row says where its site folded, and its price
            self._where = (comparison, comparison.folded_where() if comparison is not None else {},
                           present.site_prices(comparison))
            compiler = present.compiler_of(comparison) if self._where[2] else ""
            self._header.value = HEADER + (f"<small class='fi-compiler'>prices: Vela's estimate, compiler "
                                           f"{present.escape(compiler)}</small>" if compiler else "")
            self._shown = {}
        # Only the rows whose site record, marker or selection changed are written again (a toggle
        # changes a few of them; the records of the others are the same objects).
        marked = set(analysis.marker_ids)
        shown = {s.id: (s, s.id in marked, s.id == selected) for s in analysis.sites}
        changed = [s for s in analysis.sites if self._shown.get(s.id) != shown[s.id]]
        for r in present.site_rows(analysis, comparison, sites=changed, where=self._where[1], prices=self._where[2]):
            self._update_row(r, shown[r.site][1], shown[r.site][2])
            self._shown[r.site] = shown[r.site]

    def _make_row(self, site_id: str) -> W.HBox:
        select = W.Button(description=site_id, tooltip=f"select {site_id}: focus the graphs on it",
                          layout=W.Layout(width="260px")).add_class("fi-site-select")
        select.on_click(lambda _: self._on_select(site_id))
        info = W.HTML(layout=W.Layout(width="100%"))
        marker = W.Checkbox(description="marked", indent=False, layout=W.Layout(width="120px")).add_class("fi-marker")
        marker.observe(lambda change: self._marker_changed(site_id, change), names="value")
        return W.HBox([select, info, marker], layout=W.Layout(border_bottom="1px solid #ddd")).add_class("fi-site-row")

    def _marker_changed(self, site_id: str, change: dict) -> None:
        self._shown.pop(site_id, None)  # the box now shows what the user clicked: the next render writes the row
        self._on_marker(site_id, change)

    def _update_row(self, r: present.SiteRow, marked: bool, selected: bool) -> None:
        row = self._rows[r.site]
        select, info, marker = row.children
        select.button_style = "info" if selected else ""
        info.value = (f"<div style='display:grid;grid-template-columns:90px 1fr'>{r.decision_html()}"
                      f"{r.details_html()}</div>")
        marker.value = marked
        wanted = {"fi-site-row", f"fi-site-{r.decision}"} | ({"fi-selected"} if selected else set())
        have = self._classes[r.site]
        for c in have - wanted:
            row.remove_class(c)
        for c in wanted - have:
            row.add_class(c)
        self._classes[r.site] = wanted

"""Widget 1 (notebook 01): a value's bits, stored value and relative error in each
format, and where it falls on a format's number line."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable

import ipywidgets as widgets

from amp_lessons.core.formats import FORMATS, decompose, relative_error, resolve_format
from amp_lessons.i18n import N_, _
from amp_lessons.teaching.plots.number_lines import (
    _line_limits,
    _NumberLine,
    _short,
    _zone_note,
)
from amp_lessons.teaching.widgets.panel import Panel

BIT_COLORS = {"sign": "#c0392b", "exponent": "#1f5fa8", "mantissa": "#2e7d32"}
BIT_NAMES = {"sign": N_("sign"), "exponent": N_("exponent"), "mantissa": N_("mantissa")}
EXPLORER_FORMATS = ("fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")


_POWER = re.compile(r"^([+-]?)\s*2\s*(?:\^|\*\*)\s*\(?\s*([+-]?\d+)\s*\)?$")


def parse_value(text: str) -> float:
    """Read a typed number: ``1e-4``, ``-65504``, ``inf``, ``nan`` or ``2^-24``.

    Example:
        >>> parse_value("2^-24"), parse_value(" -1.5e3 ")
        (5.960464477539063e-08, -1500.0)
    """
    s = text.strip().replace("\u2212", "-").replace("_", "")
    power = _POWER.match(s)
    if power:
        return (-1.0 if power.group(1) == "-" else 1.0) * 2.0 ** int(power.group(2))
    try:
        return float(s)
    except ValueError:
        message = _(
            "could not read {text} as a number: type e.g. 1e-4, -3.5, 65504, "
            "2^-24 or inf"
        ).format(text=repr(text))
        raise ValueError(message) from None


def format_rows(value: float, names: Iterable[str] = EXPLORER_FORMATS) -> list[dict]:
    """What each format makes of `value`: bits, stored value, error, kind, zone.

    Example:
        >>> row = format_rows(1e-4, ["fp16"])[0]
        >>> row["exponent"], row["stored"], row["kind"]
        ('00001', 0.00010001659393310547, 'normal')
    """
    rows = []
    for name in names:
        f = resolve_format(name)
        d = decompose(value, f)
        rows.append(
            {
                "format": f.name,
                "sign": d.sign,
                "exponent": d.exponent,
                "mantissa": d.mantissa,
                "stored": d.value,
                "kind": d.kind,
                "rel_error": relative_error(value, f),
                "zone": _zone_note(value, f),
            }
        )
    return rows


def _bits_html(row: dict) -> str:
    return "&nbsp;".join(
        f'<span style="color:{BIT_COLORS[k]}">{row[k]}</span>'
        for k in ("sign", "exponent", "mantissa")
    )


def rows_html(rows: list[dict], highlight: str | None = None) -> str:
    """An HTML table of ``format_rows``: bits coloured sign | exponent | mantissa."""
    pad = "padding:2px 12px 2px 4px;text-align:left"  # columns never touch
    mono = f"{pad};font-family:monospace"
    titles = [
        _("format"),
        _("bits: ")
        + " | ".join(
            f'<span style="color:{c}">{_(BIT_NAMES[k])}</span>'
            for k, c in BIT_COLORS.items()
        ),
        _("stored value"),
        _("relative error"),
        _("what it is"),
    ]
    head = "<tr>" + "".join(f'<th style="{pad}">{t}</th>' for t in titles) + "</tr>"
    body = []
    for r in rows:
        shade = (
            "font-weight:bold;background:#eef3fb" if r["format"] == highlight else ""
        )
        rel = r["rel_error"]
        rel_text = "-" if math.isnan(rel) else f"{rel:.2e}" if rel else _("0 (exact)")
        body.append(
            f'<tr style="{shade}"><td style="{pad}">{r["format"]}</td>'
            f'<td style="{mono}">{_bits_html(r)}</td>'
            f'<td style="{mono}">{r["stored"]:.9g}</td>'
            f'<td style="{pad}">{rel_text}</td>'
            f'<td style="{pad}">{html.escape(r["zone"])}</td></tr>'
        )
    return (
        '<table style="border-collapse:collapse;font-size:13px">'
        + head
        + "".join(body)
        + "</table>"
    )


class RangeExplorer(Panel):
    """Pick a value; see its bits in each format and its place on a number line.

    Controls: ``slider`` (FloatLogSlider of |value|, 1e-9 to 1e6), ``sign``
    (ToggleButtons "+"/"-"), ``text`` (type a value: ``1e-4``, ``2^-24``, ``inf``;
    Enter applies it), ``fmt`` (Dropdown: the format on the number line).
    Outputs: ``table`` (HTML of ``rows``), ``image`` (PNG of ``plot_number_line``),
    ``message`` (notes and input errors). ``value`` is the value shown, ``rows`` what
    each format makes of it (``format_rows``). Moving the slider rounds the value to
    4 significant digits, so the text box shows exactly the value analysed.

    Example:
        >>> w = fp16_range_explorer(1e-4)
        >>> w.text.value = "2^-24"          # as if typed and Enter pressed
        >>> w.rows[3]["format"], w.rows[3]["kind"]
        ('fp16', 'subnormal')
    """

    def __init__(self, value: float = 1e-4, fmt: str = "fp16") -> None:
        value = float(value)
        resolve_format(fmt)
        self._syncing = False
        self.slider = widgets.FloatLogSlider(
            value=1e-4,
            base=10,
            min=-9,
            max=6,
            step=0.05,
            readout_format=".3g",
            description="|x|",
            continuous_update=False,
            layout=widgets.Layout(width="430px"),
        )
        self.sign = widgets.ToggleButtons(
            options=[("+", 1), ("\u2212", -1)],
            value=1,
            description=_("sign"),
            style={"button_width": "34px", "description_width": "40px"},
            # JupyterLab shows ToggleButtons as a block: label above the buttons
            layout=widgets.Layout(
                display="flex", flex_flow="row", align_items="center"
            ),
        )
        self.text = widgets.Text(
            description=_("type x"),
            style={"description_width": "initial"},  # the label whole, in Spanish too
            continuous_update=False,
            placeholder="1e-4, 65504, 2^-24, inf",
            layout=widgets.Layout(width="230px"),
        )
        self.fmt = widgets.Dropdown(
            options=list(EXPLORER_FORMATS),
            value=fmt,
            description=_("number line"),
            style={"description_width": "initial"},  # "recta numérica" was cut
            layout=widgets.Layout(width="260px"),
        )
        self.table = widgets.HTML()
        self.value = value
        self.rows: list[dict] = []
        self._lines: dict[tuple, _NumberLine] = {}  # static number lines, rendered
        super().__init__(
            [
                widgets.HBox([self.slider, self.sign]),
                widgets.HBox([self.text, self.fmt]),
                self.table,
            ]
        )
        self.slider.observe(self._on_slider, "value")
        self.sign.observe(self._on_sign, "value")
        self.text.observe(self._on_text, "value")
        self.fmt.observe(lambda _: self.redraw(), "value")
        self.set_value(value)

    @property
    def table_html(self) -> str:
        """The HTML table shown, one row per format."""
        return self.table.value

    def set_value(self, value: float, typed: str | None = None) -> None:
        """Show `value`: moves the slider, sign and text box to it, then redraws.

        `typed`: the text it was read from, left in the box as the student wrote it.
        """
        self.value = float(value)
        note = ""
        self._syncing = True
        try:
            if typed is None:
                self.text.value = _short(self.value)
            if not math.isnan(self.value):
                self.sign.value = -1 if math.copysign(1.0, self.value) < 0 else 1
            size = abs(self.value)
            lo, hi = 10.0**self.slider.min, 10.0**self.slider.max
            if math.isfinite(size) and lo <= size <= hi:
                self.slider.value = size
            elif not math.isnan(size):
                self.slider.value = lo if size < lo else hi
                where = (
                    _("0 has no place on a log scale")
                    if size == 0
                    else _("{value} is beyond the slider's {lo} to {hi}").format(
                        value=f"{self.value:g}", lo=f"{lo:g}", hi=f"{hi:g}"
                    )
                )
                note = _(
                    "{where}: the slider waits at its end; the table and the "
                    "plot show the typed value."
                ).format(where=where)
        finally:
            self._syncing = False
        self._say(note)
        self.redraw()

    def _on_slider(self, change) -> None:
        if self._syncing:
            return
        self.set_value(self.sign.value * float(f"{change['new']:.4g}"))

    def _on_sign(self, change) -> None:
        if self._syncing:
            return
        self.set_value(math.copysign(self.value, change["new"]))

    def _on_text(self, change) -> None:
        if self._syncing:
            return
        try:
            value = parse_value(change["new"])
        except ValueError as e:
            self._say(f"{e}. Still showing {_short(self.value)}.", error=True)
            return
        self.set_value(value, typed=change["new"])

    def _draw(self) -> None:
        self.rows = format_rows(self.value)
        self.table.value = rows_html(self.rows, highlight=self.fmt.value)
        f = FORMATS[self.fmt.value]
        key = (f.name, *_line_limits(f, self.value))
        if key not in self._lines:
            if len(self._lines) >= 12:  # values far off the slider: keep a few
                self._lines.pop(next(iter(self._lines)))
            self._lines[key] = _NumberLine(f, *key[1:])
        line = self._lines[key]
        line.mark(self.value)
        self.image.value = line.blit.png()


def fp16_range_explorer(value: float = 1e-4) -> RangeExplorer:
    """The FP16 range explorer of notebook 01 (see ``RangeExplorer``).

    Example:
        >>> w = fp16_range_explorer(1e-4)
        >>> w.slider.value = 1e-6    # fp16: subnormal, 5 significant bits of 11
        >>> w.rows[3]["kind"], w.text.value
        ('subnormal', '1e-06')
    """
    return RangeExplorer(value)

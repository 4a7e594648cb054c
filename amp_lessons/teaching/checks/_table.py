"""The table a check prints: one line per case, its hint under a failing one, and
a failed table kept to `FAILED_LINES` lines, the error line under it included.

The engine (`_engine`) builds the rows and prints them here. Not covered here:
what a case expects (the lesson's grader module).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from amp_lessons.i18n import N_, _

# a row is the engine's `_engine.Row` (case, expected, got, ok, hint, note); not
# imported, so that the engine imports this module and not the other way round
Row = Any

__all__ = ["FAILED_LINES", "NOT_SHOWN", "cut", "print_table"]

NOT_SHOWN = N_("(not shown)")
"""The expected cell of a multiple-choice or matching item: the table says right or
wrong, never the right answer (translated when the table is printed)."""

FAILED_LINES = 15
"""The most lines a failed check shows a learner: its table, hints and the error line
together (a longer table is shown compact, `print_table`)."""


def cut(text: str, width: int) -> str:
    """`text`, shortened with an ellipsis to at most `width` characters."""
    return text if len(text) <= width else text[: width - 1] + "…"


def header(title: str, total: int, hidden: bool) -> str:
    """The table's first line: "check_x: 3 cases", "check_x: 1 hidden case".

    One case is said in the singular: in the quiz of lesson 08 every question is a
    one-case check, as is any answer that is not a function or raises. English and
    Spanish both use the singular for 1 alone, so two messages serve both languages.
    The grading feedback finds these lines by their forms (feedback.py).
    """
    if total == 1:
        form = (
            _("{title}: {total} hidden case") if hidden else _("{title}: {total} case")
        )
    else:
        form = (
            _("{title}: {total} hidden cases")
            if hidden
            else _("{title}: {total} cases")
        )
    return form.format(title=title, total=total)


def print_table(title: str, rows: Sequence[Row], hidden: bool) -> None:
    """Print one line per case and, under each failing one, its hint (and under any
    row, its note).

    A failed check that would take more than `FAILED_LINES` lines is shown compact:
    its failing rows first, each hint once, as many as fit, then one line for the
    cases that passed and one for the failing ones left out.
    """
    print(header(title, len(rows), hidden))
    head = (_("case"), _("expected"), _("got"))
    # the expected cell of a choice item is NOT_SHOWN, said in the table's language
    expected = [_(r.expected) if r.expected == NOT_SHOWN else r.expected for r in rows]
    columns = ([r.case for r in rows], expected, [r.got for r in rows])
    widths = [
        min(max(len(name), *(len(cell) for cell in cells)), cap)
        # expected's cap fits Spanish's "escala 1024.0, pérdida 0.812" (24 cut it)
        for name, cells, cap in zip(head, columns, (30, 30, 30), strict=True)
    ]
    print(
        "  "
        + "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
        + "  "
        + _("result")
    )
    blocks = [
        _row_lines(row, shown, widths)
        for row, shown in zip(rows, expected, strict=True)
    ]
    room = FAILED_LINES - 3  # the title, the header and the error line under it
    if all(row.ok for row in rows) or sum(map(len, blocks)) <= room:
        for block in blocks:
            print("\n".join(block))
        return
    for line in _compact(rows, blocks, room):
        print(line)


def _row_lines(row: Row, shown: str, widths: list[int]) -> list[str]:
    """The row's line, then its hint (if it failed) and its note, wrapped."""
    cells = (row.case, shown, row.got)
    line = "  ".join(cut(c, w).ljust(w) for c, w in zip(cells, widths, strict=True))
    lines = [f"  {line}  {_('ok') if row.ok else _('FAIL')}"]
    for label, text in (
        (_("hint"), "" if row.ok else row.hint),
        (_("note"), row.note),
    ):
        if text:
            lines += _hint_lines(text, label)
    return lines


def _hint_lines(text: str, label: str | None = None) -> list[str]:
    """A hint (or note) under its row, wrapped to 88 columns."""
    return textwrap.wrap(
        text,
        width=88,
        initial_indent=f"      {label or _('hint')}: ",
        subsequent_indent="            ",
    )


def _compact(rows: Sequence[Row], blocks: list[list[str]], room: int) -> list[str]:
    """A failed table in `room` lines, rows in their order. What a learner needs
    first comes first: the first failing row with its hint, each failing row whose
    hint is not shown yet (with it; a hint that repeats one shown and adds to it,
    torch's message say, is cut to "the same as above" and the addition), the other
    failing rows, then the passing rows if they all fit; one line names the failing
    cases left out, one counts the passing ones."""
    failing = [i for i, row in enumerate(rows) if not row.ok]
    passed = len(rows) - len(failing)
    size: dict[int, int] = {failing[0]: len(blocks[failing[0]])}
    hints = {rows[failing[0]].hint}
    reserved = 1 + (passed > 0)  # the "more failing" and "passed" lines

    def fits(lines: int) -> bool:
        return sum(size.values()) + reserved + lines <= room

    for i in failing[1:]:  # each hint not shown yet, with its row, while it fits
        said = next((h for h in hints if h and rows[i].hint.startswith(h)), None)
        if said and rows[i].hint != said:  # the same fault and more (torch's words)
            blocks[i] = blocks[i][:1] + _hint_lines(
                _("the same as above") + rows[i].hint[len(said) :]
            )
        if rows[i].hint not in hints and fits(len(blocks[i])):
            size[i] = len(blocks[i])
            hints.add(rows[i].hint)
    for i in failing:  # the other failing rows, one line each
        if i not in size and fits(1):
            size[i] = 1
    left_out = [rows[i].case for i in failing if i not in size]
    reserved -= not left_out
    if passed and fits(passed - 1):  # the passing rows themselves, instead of a count
        size.update({i: 1 for i, row in enumerate(rows) if row.ok})
        passed = 0
    out = [line for i in sorted(size) for line in blocks[i][: size[i]]]
    if left_out:
        line = _("  ... {count} more failing: {cases}").format(
            count=len(left_out), cases="; ".join(left_out)
        )
        out.append(cut(line, 88))
    if passed:
        out.append(
            _("  ({passed} of {total} cases passed)").format(
                passed=passed, total=len(rows)
            )
        )
    return out

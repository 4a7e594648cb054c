"""How a lesson becomes slides a room can read: exercises shown as the student edition
shows them, with the solution behind them, and every slide cut to fit a 1280 x 720
stage.

``slides.export_deck`` runs `lay_out_deck` on each lesson before nbconvert. The cuts
come from ``slide_heights``' estimate of each cell's height on the stage; the deck's
own script then shrinks a slide that still runs over, never below ``MIN_ZOOM`` (see
``slides``). ``tests/test_slides.py`` renders every deck in Chromium and fails on any
overflow or any exercise slide that shows its solution.

Not covered here: choosing where a lesson's sections start (the notebook's own
``slide``/``subslide`` marks), live RISE slides (they show the notebook as it is).
"""

from __future__ import annotations

import ast
import copy
import html
import re

import nbformat

from amp_lessons.tooling.grading.course import (
    CODE_STUB,
    CODE_STUBS,
    is_solution_cell,
    is_test_cell,
)
from amp_lessons.tooling.grading.slide_heights import (
    CODE_CELL,
    CODE_LH,
    OUT_AREA,
    OUTPUT_ONLY,
    ROOM_H,
    ROOM_W,
    block_height,
    cell_height,
    image_height,
    markdown_blocks,
    output_height,
    slide_type,
    text_height,
)

IMG_MIN_H = 300  # a plot is shrunk down to this to stay beside its question
BUDGET_H = 0.95 * ROOM_H  # cut at this estimate: the rest is the estimate's error
CONTINUED = "amp-continued"  # class of the "(continued)" line on a cut slide


def _set_type(cell, kind: str) -> None:
    cell.setdefault("metadata", {}).setdefault("slideshow", {})["slide_type"] = kind


# ---------------------------------------------------------------------------------
# Exercises: the stub on the slide, the solution in the notes and on the next slide


def _without_markers(source: str) -> str:
    return "\n".join(
        line
        for line in source.splitlines()
        if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line
    )


def present_exercises(nb, handout: bool = False):
    """Show each exercise as a student gets it; keep its solution for the reveal.

    The solution cell shows nbgrader's stub and the graded cell its visible tests
    (nbgrader's own ClearSolutions and ClearHiddenTests, as in the student edition).
    The solution goes into the exercise slide's speaker notes and onto a
    "Solution" slide right after it, with the check's output on it (executed decks):
    the room sees it when the instructor moves on. A ``handout`` keeps neither, and
    no test cell's output either (what the check printed of the solution's answers,
    a quiz's key among them).
    """
    from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

    solutions = {
        id(c): _without_markers(c.source)
        for c in nb.cells
        if is_solution_cell(c) and c.cell_type == "code"
    }
    resources = {"language": "python"}
    # the stub in the lesson's language, as the student edition has it
    stub = CODE_STUBS.get(nb.metadata.get("language", "en"), CODE_STUB)
    nb, resources = ClearSolutions(
        code_stub={"python": stub}, enforce_metadata=False
    ).preprocess(nb, resources)
    nb, _ = ClearHiddenTests().preprocess(nb, resources)
    cells, pending, title = [], [], ""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and slide_type(cell) in ("slide", "subslide"):
            title = _title(cell.source) or title
        cells.append(cell)
        if id(cell) in solutions and handout:
            cell.outputs = []
            continue
        if handout and is_test_cell(cell):
            cell.outputs = []
            continue
        if id(cell) in solutions:  # the notes go with the stub, on its slide
            cell.outputs = []
            pending.append(solutions[id(cell)])
            notes = nbformat.v4.new_markdown_cell(
                f"Solution:\n\n```python\n{solutions[id(cell)]}\n```"
            )
            _set_type(notes, "notes")
            cells.append(notes)
        if not (is_test_cell(cell) and pending):
            continue
        outputs, cell.outputs = cell.get("outputs", []), []
        short = re.sub(r"^Exercise\s*\d*\s*:\s*", "", title)
        heading = nbformat.v4.new_markdown_cell(f"### Solution: {short}")
        _set_type(heading, "subslide")
        shown = nbformat.v4.new_code_cell("\n\n".join(pending))
        check = nbformat.v4.new_code_cell(cell.source, outputs=outputs)
        for c in (shown, check):
            _set_type(c, "-")
        cells += [heading, shown, check]
        pending = []
    nb.cells = cells
    return nb


def _title(source: str) -> str:
    match = re.search(r"^#{1,4}\s+(.+)$", source, re.M)
    return match.group(1).strip() if match else ""


# ---------------------------------------------------------------------------------
# Cutting slides


def _shrink_plots(cells, excess: float) -> bool:
    """Shrink the plots in `cells` (never below IMG_MIN_H) so that they take
    `excess` pixels less; False (and nothing changed) when they cannot."""
    plots = [
        o
        for c in cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    spare = sum(max(0.0, image_height(o) - IMG_MIN_H) for o in plots)
    if not plots or spare < excess:
        return False
    for o in plots:
        height = image_height(o)
        cut = excess * max(0.0, height - IMG_MIN_H) / spare
        o.setdefault("metadata", {}).setdefault("image/png", {})["height"] = int(
            height - cut
        )
    return True


def _pack(head: str, rows: list[str], tail: str, height) -> list[str]:
    """``head + rows + tail`` cut into several such texts that each fit (a table's
    header repeats on each)."""
    chunks, current = [], []
    for row in rows:
        if current and height(head + "".join([*current, row]) + tail) > BUDGET_H:
            chunks.append(head + "".join(current) + tail)
            current = []
        current.append(row)
    return [*chunks, head + "".join(current) + tail]


def _table_parts(block: str) -> list[str]:
    lines = block.splitlines(keepends=True)
    if (
        block_height(block) <= BUDGET_H
        or len(lines) < 4
        or not all(line.lstrip().startswith("|") for line in lines)
    ):
        return [block]
    return _pack("".join(lines[:2]), lines[2:], "", block_height)


def _output_parts(output) -> list:
    """One output too tall for a slide, cut between lines or table rows."""
    if output_height(output) + OUT_AREA <= BUDGET_H:
        return [output]
    if output.get("output_type") == "stream":

        def stream(text):
            return nbformat.v4.new_output(
                "stream", name=output.get("name", "stdout"), text=text
            )

        lines = output.get("text", "").splitlines(keepends=True)
        return [
            stream(t)
            for t in _pack("", lines, "", lambda t: output_height(stream(t)) + OUT_AREA)
        ]
    data = output.get("data", {})
    html = data.get("text/html")
    html = "".join(html) if isinstance(html, list) else html
    table = re.match(r"(?s)(.*?<tbody[^>]*>)(.*)(</tbody>.*)", html or "")
    if not table:
        return [output]

    def shown(text):
        return nbformat.v4.new_output("display_data", data={"text/html": text})

    rows = re.findall(r"(?s)<tr.*?</tr>\s*", table.group(2))
    return [
        shown(t)
        for t in _pack(
            table.group(1),
            rows,
            table.group(3),
            lambda t: output_height(shown(t)) + OUT_AREA,
        )
    ]


def _statements(source: str) -> list[str]:
    """The cell's top-level statements, each with the comments and blank lines above
    it (IPython's ``%magic`` lines count as statements); one piece if it does not
    parse."""
    lines = source.splitlines(keepends=True)
    plain = "".join(
        "pass\n" if line.lstrip().startswith(("%", "!")) else line for line in lines
    )
    try:
        body = ast.parse(plain).body
    except SyntaxError:
        return [source]
    ends = [n.end_lineno for n in body][:-1]  # what follows a statement: the next's
    return [
        "".join(lines[a:b])
        for a, b in zip([0, *ends], [*ends, len(lines)], strict=True)
    ]


def _code_parts(source: str) -> list[str]:
    """Code too long for a slide, cut between top-level statements (a loop stays
    whole); fitting code comes back whole, and no code as nothing."""
    if not source.strip():
        return []

    def height(text):
        return text_height(text, CODE_LH, ROOM_W - 16) + CODE_CELL

    if height(source) <= BUDGET_H:
        return [source]
    return [part.strip("\n") for part in _pack("", _statements(source), "", height)]


def _pieces(cell) -> list:
    """A cell too tall for one slide, as cells that each fit (when they can).

    Markdown splits between blocks and a table between rows; a code cell into its
    input and its outputs, and a long printout or table between lines or rows.
    """
    if cell_height(cell) <= BUDGET_H:
        return [cell]
    if cell.cell_type == "markdown":
        blocks = [t for b in markdown_blocks(cell.source) for t in _table_parts(b)]
        parts = []
        for block in blocks:
            if parts and block_height(block) + cell_height(parts[-1]) <= BUDGET_H:
                parts[-1].source += "\n\n" + block
            else:
                part = nbformat.v4.new_markdown_cell(block)
                _set_type(part, "-")
                parts.append(part)
        _set_type(parts[0], slide_type(cell))
        return parts
    if cell.cell_type != "code":
        return [cell]
    parts = []
    for source in _code_parts(cell.source):
        head = copy.deepcopy(cell)
        head.source, head.outputs = source, []
        _set_type(head, slide_type(cell) if not parts else "-")
        parts.append(head)
    for output in cell.outputs:
        for piece in _output_parts(output):
            last = parts[-1] if parts else None
            if (
                last is not None
                and OUTPUT_ONLY in last.metadata.get("tags", [])
                and cell_height(last) + output_height(piece) <= BUDGET_H
            ):
                last.outputs.append(piece)
                continue
            tail = nbformat.v4.new_code_cell("", outputs=[piece])
            tail.metadata["tags"] = [OUTPUT_ONLY]
            _set_type(tail, "-")
            parts.append(tail)
    if len(parts) > 1 and cell_height(parts[0]) + cell_height(parts[1]) <= BUDGET_H:
        parts[0].outputs = parts.pop(1).outputs  # the code and its first output
    return parts


def _slides(cells) -> list[list]:
    slides = []
    for cell in cells:
        if not slides or slide_type(cell) in ("slide", "subslide"):
            slides.append([])
        slides[-1].append(cell)
    return slides


def _continued(title: str):
    plain = html.escape(re.sub(r"[`*_]", "", title or "this slide"))
    cell = nbformat.v4.new_markdown_cell(
        f'<p class="{CONTINUED}">{plain}, continued</p>'
    )
    _set_type(cell, "subslide")
    return cell


def _bundles(pieces) -> list[list]:
    """Prose travels with the code right after it; notes with what they follow."""
    bundles = []
    for piece in pieces:
        joins = bundles and (
            slide_type(piece) == "notes"
            or (
                bundles[-1][-1].cell_type == "markdown"
                and piece.cell_type == "code"
                and slide_type(piece) == "-"
            )
        )
        if joins:
            bundles[-1].append(piece)
        else:
            bundles.append([piece])
    return bundles


def cut_to_fit(nb):
    """Cut each slide whose estimated height passes `BUDGET_H` into several.

    Cuts fall between cells (a cell too tall alone is cut first, see `_pieces`),
    never between a prose cell and the code right after it unless the two cannot
    share a slide. Each extra slide is a vertical ("subslide") one under the first,
    headed "<title>, continued".
    """
    out, title = [], ""
    for slide in _slides([c for c in nb.cells if slide_type(c) != "skip"]):
        title = next(
            (
                _title(c.source)
                for c in slide
                if c.cell_type == "markdown" and _title(c.source)
            ),
            title,
        )  # else the section's
        units = []
        for bundle in _bundles([p for c in slide for p in _pieces(c)]):
            size = sum(map(cell_height, bundle))
            tall = size > BUDGET_H and not _shrink_plots(bundle, size - BUDGET_H)
            units += [[c] for c in bundle] if tall else [bundle]
        current, height = [], 0.0
        for unit in units:
            size = sum(map(cell_height, unit))
            fresh = len(current) == 1 and CONTINUED in current[0].source
            if (
                current
                and not fresh
                and height + size > BUDGET_H
                and _shrink_plots(unit, height + size - BUDGET_H)
            ):
                size = sum(map(cell_height, unit))  # the plot beside its question
            if current and not fresh and height + size > BUDGET_H:
                out += current
                current = [_continued(title)]
                height = cell_height(current[0])
                if slide_type(unit[0]) in ("slide", "subslide", "fragment"):
                    _set_type(unit[0], "-")
            current += unit
            height += size
        out += current
    nb.cells = out
    return nb


def _join_streams(nb) -> None:
    """One printout per stream: a kernel may send a cell's prints in several
    messages, which would show as separate blocks with gaps between them."""
    for cell in nb.cells:
        joined = []
        for output in cell.get("outputs", []):
            last = joined[-1] if joined else None
            if (
                last is not None
                and output.get("output_type") == "stream" == last.get("output_type")
                and output.get("name") == last.get("name")
            ):
                last["text"] += output["text"]
            else:
                joined.append(output)
        if cell.cell_type == "code":
            cell.outputs = joined


def lay_out_deck(nb, handout: bool = False):
    """The lesson as the deck shows it: exercises stubbed, solutions behind them,
    proof cells dropped, slides cut to fit. Works on a copy. A ``handout`` has no
    solutions, no check outputs and no speaker notes (`present_exercises`)."""
    nb = copy.deepcopy(nb)
    _join_streams(nb)
    nb = present_exercises(nb, handout)
    if handout:
        nb.cells = [c for c in nb.cells if slide_type(c) != "notes"]
    nb = cut_to_fit(nb)
    for i, cell in enumerate(nb.cells):  # new cells get random ids: the same deck twice
        cell["id"] = f"slide-cell-{i}"  # must be the same file
    return nb

"""How tall a notebook cell is on a slide, estimated before any browser sees it:
markdown wrapped at the slide's width, code and printed lines, table rows, plots at
the size the PNG and the CSS give them.

``deck_layout`` cuts slides with these estimates; the stage's size and the CSS they
assume are the deck template's (``slides``). Measured in Chromium on the course's
decks with Debian's fonts (DejaVu, among the widest); ``tests/test_slides.py``
renders every deck and fails when a slide still runs over.
"""

from __future__ import annotations

import math
import re
import struct
from base64 import b64decode

# The stage (reveal.js scales it to the window) and what the template's CSS gives it.
STAGE_W, STAGE_H = 1280, 720
PAD_X, PAD_Y = 40, 18  # section padding
ROOM_W, ROOM_H = STAGE_W - 2 * PAD_X, STAGE_H - 2 * PAD_Y
MIN_ZOOM = 0.8  # the most a slide is shrunk to fit: 20 px text stays 16 px
IMG_MAX_H = 440  # CSS max-height of a plot: a picture leaves room for its question

# Per kind of block: line height, average character width, the space around it.
TEXT_W = ROOM_W - 43  # the markdown column
PARA_LH, LIST_LH, TEXT_CHAR_W, BLOCK_GAP = 26.0, 32.0, 10.9, 20.0
LIST_INDENT, LIST_GAP = 60.0, 10.0
HEADING = {
    1: (60.0, 24.6, 50.0),
    2: (38.4, 16.3, 39.2),
    3: (31.2, 13.3, 35.6),
    4: (28.0, 11.5, 32.0),
}  # line height, character width, margins
CODE_LH, CODE_CHAR_W, CODE_CELL = 22.75, 11.45, 32.3  # CODE_CELL: box and margins
OUT_LH, OUT_PAD, OUT_AREA, IMG_PAD = 22.8, 16.0, 27.0, 32.0
OUT_W = ROOM_W - 90  # a printed line's room, measured (output area, 100% wide)
ROW_LH, ROW_PAD = 32.0, 4.0  # table rows
OUTPUT_ONLY = "amp-output-only"  # tag: nbconvert drops this cell's input


def slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type") or "-"


def _visible(text: str) -> float:
    """Width of markdown text in body characters (code spans add their padding)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text only
    code = sum(len(m) for m in re.findall(r"`([^`]*)`", text))
    plain = re.sub(r"[*_`]{1,2}|<[^>]+>|\\", "", text)
    return len(plain) + 0.05 * code + 1.0 * text.count("`") // 2


def _lines(chars: float, width: float, char_w: float) -> int:
    return max(1, math.ceil(chars * char_w / width))


_BULLET = re.compile(r"^\s{0,3}([-*+]|\d+[.)])\s")


def markdown_blocks(source: str) -> list[str]:
    """Split markdown into blocks: at blank lines, at a heading, and where a list
    starts right under a paragraph; fenced code and $$ math stay whole."""
    blocks, current, fence = [], [], None

    def cut():
        if current:
            blocks.append("\n".join(current))
        current.clear()

    for line in source.splitlines():
        stripped = line.strip()
        if fence is not None:
            current.append(line)
            if stripped.startswith(fence) and len(current) > 1:
                fence = None
            continue
        if stripped.startswith(("```", "~~~", "$$")):
            cut()
            one_line_math = (
                stripped.startswith("$$")
                and len(stripped) > 2
                and stripped.endswith("$$")
            )
            fence = None if one_line_math else stripped[:3]
            current.append(line)
            continue
        if not stripped:
            cut()
        elif re.match(r"#{1,6}(?!#)", stripped):  # nbconvert: "#1267" is one too
            cut()
            current.append(line)
            cut()
        else:
            if (
                current
                and _BULLET.match(line)
                and not _BULLET.match(current[0])
                and not current[0].lstrip().startswith(("|", ">"))
            ):
                cut()
            current.append(line)
    cut()
    return blocks


def block_height(block: str) -> float:
    """Pixels one markdown block takes, its margins included."""
    lines = block.splitlines()
    first = lines[0].lstrip()
    heading = re.match(r"(#{1,6})(?!#)", first)
    if heading:
        line_h, char_w, gap = HEADING.get(len(heading.group(1)), HEADING[4])
        return line_h * _lines(_visible(first[heading.end() :]), TEXT_W, char_w) + gap
    if first.startswith(("```", "~~~")):
        return (len(lines) - 2) * CODE_LH + CODE_CELL
    if first.startswith(">"):  # a quote: 70% wide
        text = " ".join(line.lstrip("> ").strip() for line in lines)
        rows = _lines(_visible(text), 0.7 * TEXT_W, TEXT_CHAR_W)
        return PARA_LH * rows + 2 * BLOCK_GAP
    if first.startswith("$$"):
        return 2.5 * PARA_LH + BLOCK_GAP
    if all(line.lstrip().startswith("|") for line in lines):
        rows = [
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in lines
            if not re.match(r"^\s*\|[\s:|-]+\|\s*$", line)
        ]
        ncols = max(map(len, rows))
        longest = [
            max((_visible(r[i]) for r in rows if i < len(r)), default=1) + 2
            for i in range(ncols)
        ]  # auto layout: wider where text is longer
        widths = [max(80.0, TEXT_W * n / sum(longest)) - 16 for n in longest]
        height = sum(
            ROW_PAD
            + ROW_LH
            * max(_lines(_visible(c), widths[i], TEXT_CHAR_W) for i, c in enumerate(r))
            for r in rows
        )
        return height + BLOCK_GAP
    if not _BULLET.match(first):
        text = " ".join(line.strip() for line in lines)
        return PARA_LH * _lines(_visible(text), TEXT_W, TEXT_CHAR_W) + BLOCK_GAP
    items, item = [], []
    for line in lines:
        if _BULLET.match(line) and item:
            items.append(" ".join(item))
            item = []
        item.append(line.strip())
    items.append(" ".join(item))
    rows = sum(_lines(_visible(i), TEXT_W - LIST_INDENT, TEXT_CHAR_W) for i in items)
    return LIST_LH * rows + LIST_GAP


def _png_size(data: str) -> tuple[int, int]:
    head = b64decode(data[:64])
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def text_height(text: str, line_h: float = OUT_LH, width: float = OUT_W) -> float:
    """Monospace lines, wrapped at `width`."""
    rows = sum(
        _lines(len(line), width, CODE_CHAR_W) for line in text.rstrip("\n").split("\n")
    )
    return rows * line_h


def image_height(output) -> float:
    """A plot's height on the slide: its own, shrunk to the width and IMG_MAX_H, or
    the height `_shrink_plots` set."""
    width, height = _png_size(output["data"]["image/png"])
    natural = min(height * min(1.0, ROOM_W / width), IMG_MAX_H)
    chosen = output.get("metadata", {}).get("image/png", {}).get("height")
    return min(natural, chosen) if chosen else natural


def output_height(output) -> float:
    """Pixels one output takes (stream, error, plot, HTML table, text)."""
    kind = output.get("output_type")
    if kind == "stream":
        return text_height(output.get("text", "")) + OUT_PAD
    if kind == "error":
        return text_height("\n".join(output.get("traceback", []))) + OUT_PAD
    data = output.get("data", {})
    if "image/png" in data:
        return image_height(output) + IMG_PAD
    if "text/html" in data:
        html = data["text/html"]
        html = "".join(html) if isinstance(html, list) else html
        rows = html.count("<tr")
        text = re.sub(r"<[^>]+>", " ", html)
        return (
            rows * (ROW_LH + 2.5)
            + PARA_LH
            * _lines(len(" ".join(text.split())), TEXT_W, TEXT_CHAR_W)
            * (rows == 0)
            + OUT_PAD
        )
    if "text/plain" in data:
        return text_height(data["text/plain"]) + OUT_PAD
    return 0.0


def cell_height(cell) -> float:
    """Estimated pixels a cell takes on the 1280 x 720 stage (0 for notes)."""
    if slide_type(cell) in ("notes", "skip"):
        return 0.0
    if cell.cell_type == "markdown":
        blocks = markdown_blocks(cell.source)
        lead = (
            0.0
            if blocks
            and (blocks[0].lstrip().startswith("#") or _BULLET.match(blocks[0]))
            else BLOCK_GAP
        )
        return lead + sum(map(block_height, blocks))
    if cell.cell_type != "code":
        return 0.0
    shown = (
        "" if OUTPUT_ONLY in cell.get("metadata", {}).get("tags", []) else cell.source
    )
    height = (
        text_height(shown, CODE_LH, ROOM_W - 16) + CODE_CELL if shown.strip() else 0.0
    )
    outputs = cell.get("outputs", [])
    return height + sum(map(output_height, outputs)) + OUT_AREA * bool(outputs)

"""English in what a Spanish lesson shows.

`make test` runs every Spanish lesson as the second Run All of its English twin's
student-path kernel (tests/student_paths.py, `paused_twice`), with figures drawn as
SVG with real text too, and tests/test_student_paths.py applies `notebook_verdict`
to its outputs. It reads what each cell showed the student (its streams, its text
and HTML outputs, and the text of every matplotlib figure) and counts the lines of
four or more words that read as English. A Spanish lesson fails if more than
`MAX_ENGLISH` of those lines are English, naming them; and it fails on any number
printed the English way (``131,072``, ``12 us``). Source code a lesson prints on purpose
(``inspect.getsource``) is left out, as are identifiers and numbers.

`tests/test_spanish_outputs.py` shows it failing on an English print planted in a
Spanish notebook run that way.
"""

from __future__ import annotations

import ast
import html
import re
import textwrap

MAX_ENGLISH = 0.03  # the share of a lesson's output lines that may read as English

# Words far more frequent in one language than in the other, in the course's output.
ENGLISH = set(
    """the and of is are was were be been with this that these those which
what you your it its to in on not for from by an at as or than then after before each
every here there only both all same more less when where without into over under has
have had would could should can cannot step steps loss scale skipped gradient gradients
weight weights memory speed time measured smallest largest kept run layer layers
value values model case cases hint expected got right wrong returns passed failed
answered shown see none first last zero zeros""".split()
)
SPANISH = set(
    """el la los las de del que y es en con un una por para no se lo su sus al
como pero más menos este esta estos estas ese esa son está están fue ser hay cada todo
todos todas paso pasos pérdida escala omitido omitidos gradiente gradientes pesos peso
memoria velocidad tiempo medido menor mayor guardado ejecución capa capas valor valores
sin cuando donde modelo modelos caso casos pista obtenido esperado correcto correcta
incorrecto devuelve aprobado aquí ambas ambos ninguno primero último cero""".split()
)
CODE_LINE = re.compile(
    r"^\s*(def |class |return\b|for |if |elif |else:|with |import "
    r"|from \S+ import|@|#|raise |assert |\"\"\"|\)|\]|\}|.*\s=\s|\$ )"
)  # the last: a shell command after its prompt, ``$ python -m amp_lessons train``


def reads_as_english(line: str) -> bool | None:
    """True or False for a line of prose (four or more words), None for anything
    else: a short line, a line of code, a row of numbers."""
    if CODE_LINE.match(line):
        return None
    prose = re.sub(r"`[^`]*`|\S*[._()\[\]=]\S*", " ", line.lower())  # code, names
    words = re.findall(r"[a-záéíóúñü]+", prose)
    if len(words) < 4:
        return None
    english = sum(w in ENGLISH for w in words)
    return english >= 2 and english > sum(w in SPANISH for w in words)


TORCH_MESSAGE = re.compile(r"\b[A-Z]\w*(Error|Warning|Exception): ")
# a number of four or more digits with the English thousands comma (131,072): a
# Spanish reader reads 131 point 072; the edition writes 131072 (GLOSARIO.md). A list
# printed by Python has a space after its commas, so (1, 024) is no such number.
COMMA_NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\d,])")
# microseconds written the English way, "12 us": the edition writes µs
US = re.compile(r"\d us\b")


def comma_numbers(outputs: list[dict]) -> list[str]:
    """The output lines with a number in English style (131,072 or 12 us)."""
    return [
        line
        for line in output_lines(outputs)
        if COMMA_NUMBER.search(line) or US.search(line)
    ]


def is_source_code(text: str) -> bool:
    """A printed function or class (``print(inspect.getsource(f))``)."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in tree.body)


def without_source_code(stream: str) -> str:
    """`stream` less the printed function or class it starts with, if any: a cell
    that prints a function's source and then its results shows one stream."""
    if not re.match(r"\s*(@|def |async def |class )", stream):
        return stream
    lines = stream.splitlines(keepends=True)
    for end in range(len(lines), 0, -1):
        if is_source_code("".join(lines[:end])):
            return "".join(lines[end:])
    return stream


def output_lines(outputs: list[dict]) -> list[str]:
    """The lines a student reads in a cell's outputs (nbformat dicts), less source
    code and torch's own messages."""
    text = []
    for output in outputs:
        stream = without_source_code(_joined(output.get("text", "")))
        if output.get("name") != "stderr":
            text.append(stream)
        data = output.get("data", {})
        if "text/html" in data:
            page = html.unescape(_joined(data["text/html"]))
            text.append(re.sub(r"<[^>]+>", " ", page))
        elif "text/plain" in data and not any(k.startswith("image/") for k in data):
            text.append(_joined(data["text/plain"]))
        if "image/svg+xml" in data:
            svg = _joined(data["image/svg+xml"])
            text += [
                re.sub(r"<[^>]+>", "", t)
                for t in re.findall(r"<text\b[^>]*>(.*?)</text>", svg, re.S)
            ]
    return [
        line
        for chunk in text
        for line in _joined(chunk).splitlines()
        if not TORCH_MESSAGE.search(line)
    ]


def english_lines(outputs: list[dict]) -> tuple[list[str], int]:
    """(the English lines, how many lines of prose) in a cell's outputs."""
    judged = [(line, reads_as_english(line)) for line in output_lines(outputs)]
    return [line for line, english in judged if english], sum(
        english is not None for _, english in judged
    )


def _joined(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def verdict(
    name: str, english: list[str], prose: int, numbers: list[str]
) -> str | None:
    """Why a Spanish lesson's output fails the check (a number written the English
    way, none may pass; more than MAX_ENGLISH of its prose lines in English), or None.
    ``english``, ``prose`` and ``numbers`` summed over its cells (`english_lines`,
    `comma_numbers`)."""
    if numbers:
        return (
            f"{name}: {len(numbers)} output line(s) write a number the "
            "English way (131,072 or 12 us; the Spanish edition writes 131072 "
            "and 12 µs): format it with amp_lessons.i18n.number, or drop the "
            "comma of its format in the lesson's catalogue:\n"
            + "\n".join(f"  {line.strip()[:100]}" for line in numbers[:40])
        )
    if prose and len(english) > MAX_ENGLISH * prose:
        return (
            f"{name}: {len(english)} of {prose} output lines read as "
            f"English (at most {MAX_ENGLISH:.0%}): translate them in the lesson's "
            "catalogue (notebooks/es/po/) or the package's "
            "(amp_lessons/locale/):\n"
            + "\n".join(f"  {line.strip()[:100]}" for line in english[:40])
        )
    return None


def notebook_verdict(name: str, nb) -> str | None:
    """`verdict` on an executed Spanish notebook's outputs, all its code cells."""
    english, prose, numbers = [], 0, []
    for cell in nb.cells:
        if cell.cell_type == "code":
            found, lines = english_lines(cell.get("outputs", []))
            english += found
            prose += lines
            numbers += comma_numbers(cell.get("outputs", []))
    return verdict(name, english, prose, numbers)

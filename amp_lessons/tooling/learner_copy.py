"""The learner's own copy of the course: the student edition of every lesson, in a
folder git ignores, made once and then kept in step with the course without ever
writing over the learner's work.

``make lab`` (``make lab EDITION=es``) calls `sync` for its edition, then opens the
copy: ``my-course/en/`` (``my-course/es/``). A manifest in each folder
(``.course.json``) records, for each lesson, the student edition it was made from.
On every later run:

- a lesson the course added is copied in (and one the learner deleted comes back);
- a lesson the course changed replaces the learner's file only when the learner
  changed none of its cells (running it, outputs and all, is no change); otherwise
  the new edition is written beside it as ``NAME.update-<id>.ipynb`` and the learner
  is told, once, in one line;
- the folders the lessons read (``results/``) are refreshed; they are data, not work.

Example::

    >>> report = sync("en")                      # doctest: +SKIP
    >>> print(report.summary())                  # doctest: +SKIP
    your copy of the course: my-course/en (13 lessons)
    new lessons: 00_amp_in_10_minutes.ipynb, 00_welcome.ipynb, ...
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from amp_lessons.tooling.grading.course import NOT_SHIPPED, _support_dirs
from amp_lessons.tooling.student_edition import read_student_notebook

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
LEARNER_DIR = ROOT / "my-course"  # in .gitignore
EDITIONS = {"en": NOTEBOOKS, "es": NOTEBOOKS / "es"}
MANIFEST = ".course.json"
# beside the Spanish lessons: the glossary their text follows
EXTRA_FILES = {"es": ("GLOSARIO.md",)}
# What `make lab` says, in the edition's language (course tooling, like the site's
# notes: the package's catalogue is for what the lessons print)
MESSAGES = {
    "en": {
        "copy": "your copy of the course: {folder} ({lessons} lessons)",
        "added": "new lessons: {names}",
        "made": "made just now: start with {first}",
        "updated": "updated (you had not changed them): {names}",
        "offered": (
            "the course changed {lesson}, which you had edited: its new edition is "
            "beside yours, as {name}"
        ),
    },
    "es": {
        "copy": "su copia del curso: {folder} ({lessons} lecciones)",
        "added": "lecciones nuevas: {names}",
        "made": "recién creada: empiece por {first}",
        "updated": "actualizadas (usted no las había cambiado): {names}",
        "offered": (
            "el curso cambió {lesson}, que usted había editado: su nueva edición "
            "está junto a la suya, como {name}"
        ),
    },
}


def lesson_paths(notebooks_dir: Path) -> list[Path]:
    """The lessons of one edition, in teaching order."""
    return sorted(p for p in Path(notebooks_dir).glob("*.ipynb") if p.is_file())


def cells_id(nb) -> str:
    """What the learner may change of a lesson: its cells' types and sources, hashed
    (outputs, execution counts and metadata left out, so running is no change)."""
    digest = hashlib.sha256()
    for cell in nb.cells:
        digest.update(json.dumps([cell.cell_type, cell.source]).encode("utf-8"))
    return digest.hexdigest()[:12]


@dataclass
class SyncReport:
    """What `sync` did, for the one paragraph `make lab` prints."""

    folder: Path
    lessons: int = 0
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    offered: list[str] = field(default_factory=list)  # NAME.update-<id>.ipynb

    def summary(self, lang: str = "en") -> str:
        """What changed, in the edition's language: one line, and one more for
        each kind of change."""
        try:
            where = self.folder.relative_to(Path.cwd())
        except ValueError:
            where = self.folder
        said = MESSAGES[lang]
        lines = [said["copy"].format(folder=where, lessons=self.lessons)]
        if self.added and len(self.added) == self.lessons:  # the first run
            lines.append(said["made"].format(first=self.added[0]))
        elif self.added:
            lines.append(said["added"].format(names=", ".join(self.added)))
        if self.updated:
            lines.append(said["updated"].format(names=", ".join(self.updated)))
        lines += [
            said["offered"].format(
                lesson=name.split(".update-")[0] + ".ipynb", name=name
            )
            for name in self.offered
        ]
        return "\n".join(lines)


def _read_manifest(folder: Path) -> dict:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _as_this_kernel_reports(nb) -> None:
    """Set the lesson's language_info to what this Python's kernel reports. JupyterLab
    writes it into a notebook when the kernel connects: with the course's bare
    {"name": "python"}, every lesson opened marked unsaved before the learner had
    changed anything. `make lab` runs the kernel of this Python."""
    try:
        from ipykernel.ipkernel import IPythonKernel
    except ImportError:  # no kernel installed here: JupyterLab's fills it in
        return
    nb.metadata["language_info"] = copy.deepcopy(IPythonKernel.language_info)


def _write(nb, path: Path) -> None:
    _as_this_kernel_reports(nb)
    # through a temporary file: an interrupted `make lab` never leaves half a lesson
    tmp = path.with_name(path.name + ".tmp")
    nbformat.write(nb, tmp)
    tmp.replace(path)


def _learner_id(path: Path) -> str | None:
    try:
        return cells_id(nbformat.read(path, as_version=4))
    except Exception:  # unreadable (half-saved, hand-edited JSON): it is theirs
        return None


def _sync_lesson(source: Path, folder: Path, manifest: dict, report) -> None:
    name = source.name
    edition = read_student_notebook(source)
    new_id = cells_id(edition)
    dest = folder / name
    base = manifest.get(name, {}).get("edition")
    if not dest.exists():
        _write(edition, dest)
        report.added.append(name)
    elif new_id == base:
        return  # the course did not change this lesson
    elif base is not None and _learner_id(dest) == base:
        _write(edition, dest)  # untouched by the learner: the new edition replaces it
        report.updated.append(name)
    else:
        offer = folder / f"{source.stem}.update-{new_id[:8]}.ipynb"
        if not offer.exists():
            _write(edition, offer)
            report.offered.append(offer.name)
        return  # the learner's file keeps its base: they may still want the update
    manifest[name] = {"edition": new_id}


def _copy_support(notebooks_dir: Path, folder: Path, lang: str) -> None:
    for support in _support_dirs(notebooks_dir):
        dest = folder / support.name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(support, dest, ignore=shutil.ignore_patterns(*NOT_SHIPPED))
    for name in EXTRA_FILES.get(lang, ()):
        if (notebooks_dir / name).is_file():
            shutil.copyfile(notebooks_dir / name, folder / name)


def sync(
    lang: str = "en",
    learner_dir: Path | None = None,
    notebooks_dir: Path | None = None,
) -> SyncReport:
    """Make or bring up to date the learner's copy of one edition (see the module's
    docstring); returns what changed. Never writes over a lesson the learner edited.

    Example: ``sync("es").folder == LEARNER_DIR / "es"``.
    """
    if lang not in EDITIONS:
        raise ValueError(f"edition {lang!r}: the course has {', '.join(EDITIONS)}")
    notebooks_dir = Path(notebooks_dir or EDITIONS[lang])
    folder = Path(learner_dir or LEARNER_DIR) / lang
    folder.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(folder)
    report = SyncReport(folder)
    lessons = lesson_paths(notebooks_dir)
    for source in lessons:
        _sync_lesson(source, folder, manifest, report)
    report.lessons = len(lessons)
    _copy_support(notebooks_dir, folder, lang)
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(folder / MANIFEST)
    return report

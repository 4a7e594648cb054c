"""The progress command: ``python -m amp_lessons progress``, the learner's progress per
lesson (exercises passed of the total, last activity, next step), read from the file
every visible check appends to (``amp_lessons.teaching.progress``).

Examples::

    python -m amp_lessons progress            # the table, and what to do next
    python -m amp_lessons progress --json     # the same, as JSON
    python -m amp_lessons progress --export progress.jsonl   # to take elsewhere
    python -m amp_lessons progress --import progress.jsonl   # merged, no duplicates
    python -m amp_lessons progress --reset    # start over (asks first; --yes skips)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from amp_lessons.i18n import _


def add_command(commands) -> argparse.ArgumentParser:
    """The progress command's parser, with its options."""
    p = commands.add_parser(
        "progress",
        help=_("show the exercises you passed per lesson and what comes next"),
        description=_(
            "Your progress through the lessons, from the file each visible check "
            "appends to in Jupyter's data folder (jupyter --data-dir)."
        ),
    )
    p.add_argument("--json", action="store_true", help=_("print it as JSON"))
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--reset",
        action="store_true",
        help=_("start over: set the file aside (asks first)"),
    )
    what.add_argument(
        "--export",
        metavar="FILE",
        type=Path,
        help=_("copy your progress to FILE, to merge it elsewhere with --import"),
    )
    what.add_argument(
        "--import",
        dest="import_file",
        metavar="FILE",
        type=Path,
        help=_("merge the records of FILE (written by --export) into yours"),
    )
    p.add_argument(
        "--yes", action="store_true", help=_("with --reset: do not ask, reset")
    )
    return p


def _notice(line: str) -> None:
    print(line, file=sys.stderr)


def _confirmed(path: Path) -> bool:
    try:
        answer = input(
            _("Set aside all your progress in {path}? [y/N] ").format(path=path)
        )
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes", _("y"), _("yes")}


def run_progress(args: argparse.Namespace) -> int:
    """Run the progress command; return the exit status."""
    from amp_lessons.teaching import progress
    from amp_lessons.teaching.progress_report import ProgressTable, lesson_rows

    path = progress.progress_file()
    if args.reset:
        if not (args.yes or _confirmed(path)):
            print(_("nothing changed"))
            return 1
        kept = progress.reset(path)
        print(
            _("progress reset; the old records are kept in {kept}").format(kept=kept)
            if kept
            else _("no progress recorded yet: nothing to reset")
        )
        return 0
    if args.export:
        progress.read_records(path, notice=_notice)  # sets a damaged file aside
        if path.exists():
            shutil.copyfile(path, args.export)
        else:
            args.export.write_text("")
        print(_("progress written to {file}").format(file=args.export))
        return 0
    if args.import_file:
        added = progress.merge_records(
            progress.load_export(args.import_file), path, notice=_notice
        )
        print(
            _("{count} new records merged into {path}").format(count=added, path=path),
            file=sys.stderr if args.json else sys.stdout,  # --json: stdout is JSON
        )
    records = progress.read_records(path, notice=_notice)
    table = ProgressTable(tuple(lesson_rows(records)), path, recording=True)
    if args.json:
        print(json.dumps(table.as_dict(), indent=2, ensure_ascii=False))
    else:
        print(table)
    return 0

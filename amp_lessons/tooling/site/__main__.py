"""``python -m amp_lessons.tooling.site [--executed DIR] [--out DIR] [--repository
OWNER/NAME]`` builds the site;
``python -m amp_lessons.tooling.site execute DIR`` executes every lesson into DIR and
every Spanish one into DIR/es (what CI hands the build with ``--executed DIR``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from amp_lessons.tooling.colab import COLAB_BRANCH, github_url, lesson_notebooks
from amp_lessons.tooling.site.build import (
    NOTEBOOKS_DIR,
    SITE_DIR,
    SPANISH,
    Home,
    build_site,
)
from amp_lessons.tooling.site.execute import execute_lessons


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["execute"]:
        parser = argparse.ArgumentParser(
            prog="python -m amp_lessons.tooling.site execute",
            description="Execute every lesson into DIR, every Spanish one into DIR/es.",
        )
        parser.add_argument("out", type=Path)
        args = parser.parse_args(argv[1:])
        start = time.perf_counter()
        lessons = lesson_notebooks()
        spanish = lesson_notebooks(NOTEBOOKS_DIR / SPANISH)
        execute_lessons(lessons, args.out)
        execute_lessons(spanish, args.out / SPANISH)
        print(
            f"executed {len(lessons)} lessons into {args.out} and {len(spanish)} "
            f"Spanish ones into {args.out / SPANISH} in "
            f"{time.perf_counter() - start:.0f} s"
        )
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m amp_lessons.tooling.site",
        description="Build the course as a static offline website (build/site/, "
        "the Spanish edition in build/site/es/).",
    )
    parser.add_argument(
        "--executed",
        type=Path,
        metavar="DIR",
        help="build from DIR/<lesson>.ipynb, already executed "
        "(else each lesson is executed first)",
    )
    parser.add_argument("--out", type=Path, default=SITE_DIR)
    parser.add_argument(
        "--repository",
        metavar="OWNER/NAME",
        default=os.environ.get("GITHUB_REPOSITORY"),
        help="the GitHub repository the Colab links open the lessons from, on the "
        f"branch {COLAB_BRANCH} that the site workflow publishes (default: "
        "$GITHUB_REPOSITORY in a workflow, else pyproject.toml's, on main)",
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        home = (
            Home(github_url(args.repository), COLAB_BRANCH) if args.repository else None
        )
    except ValueError as error:
        parser.error(str(error))
    try:
        out = build_site(executed=args.executed, out=args.out, home=home)
    except (FileNotFoundError, RuntimeError) as error:
        print(f"make site: {error}", file=sys.stderr)
        return 1
    print(
        f"built {out} in {time.perf_counter() - start:.0f} s; read it with "
        f"`python -m http.server -d {out}` and open http://127.0.0.1:8000"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

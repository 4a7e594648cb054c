"""``python -m amp_lessons.tooling.site [--executed DIR] [--out DIR]`` builds the site;
``python -m amp_lessons.tooling.site execute DIR`` executes every lesson into DIR
(what CI hands the build with ``--executed DIR``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from amp_lessons.tooling.colab import lesson_notebooks
from amp_lessons.tooling.site.build import SITE_DIR, build_site
from amp_lessons.tooling.site.execute import execute_lessons


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["execute"]:
        parser = argparse.ArgumentParser(
            prog="python -m amp_lessons.tooling.site execute",
            description="Execute every lesson into DIR.")
        parser.add_argument("out", type=Path)
        args = parser.parse_args(argv[1:])
        start = time.perf_counter()
        execute_lessons(lesson_notebooks(), args.out)
        print(f"executed {len(lesson_notebooks())} lessons into {args.out} in "
              f"{time.perf_counter() - start:.0f} s")
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m amp_lessons.tooling.site",
        description="Build the course as a static offline website (build/site/).")
    parser.add_argument("--executed", type=Path, metavar="DIR",
                        help="build from DIR/<lesson>.ipynb, already executed "
                             "(else each lesson is executed first)")
    parser.add_argument("--out", type=Path, default=SITE_DIR)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        out = build_site(executed=args.executed, out=args.out)
    except (FileNotFoundError, RuntimeError) as error:
        print(f"make site: {error}", file=sys.stderr)
        return 1
    print(f"built {out} in {time.perf_counter() - start:.0f} s; read it with "
          f"`python -m http.server -d {out}` and open http://127.0.0.1:8000")
    return 0


if __name__ == "__main__":
    sys.exit(main())

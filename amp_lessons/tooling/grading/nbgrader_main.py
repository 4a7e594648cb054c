"""What the grader runs instead of ``python -m nbgrader``: the same application, started
without three costs of its start that grading pays again and again.

- nbformat imports jsonschema, which imports ``rfc3987_syntax`` when it is installed
  (the Jupyter stack installs it) and compiles a grammar: 0.9 s of every process that
  reads a notebook. No notebook or gradebook schema uses that format, and grading
  starts an nbgrader process (and a sandbox runner) per submission, so both skip it.
- nbgrader's package imports its four Jupyter server extensions (the assignment list,
  the formgrader, ...), and with them jupyter_server and its handlers: 0.3 s of every
  process, for apps that serve nothing. Stand-ins take their place.
- A new gradebook records nbgrader's newest schema revision, which nbgrader finds by
  running ``alembic heads`` in a new Python: 2.5 s of every course made. The same
  revision is read here in-process from nbgrader's own migration scripts (0.1 s).

Example (what ``course.run_nbgrader`` and ``autograder.grade_one`` start)::

    python -m amp_lessons.tooling.grading.nbgrader_main autograde 02_underflow
"""

from __future__ import annotations

import sys
import types

SERVER_EXTENSIONS = (
    "assignment_list",
    "course_list",
    "validate_assignment",
    "formgrader",
)


def skip_iri_grammar() -> None:
    """Make ``import rfc3987_syntax`` fail as if it were not installed, so jsonschema
    leaves its ``iri`` format unchecked; call it before anything imports nbformat."""
    sys.modules.setdefault("rfc3987_syntax", None)


def skip_server_extensions() -> None:
    """Give ``import nbgrader`` stand-ins for the server extensions its ``__init__``
    imports, each with the one function it takes from them; call it before anything
    imports nbgrader. A stand-in refuses to load into a server."""
    for name in SERVER_EXTENSIONS:
        stand_in = types.ModuleType(f"nbgrader.server_extensions.{name}")
        stand_in.load_jupyter_server_extension = _not_served
        sys.modules.setdefault(stand_in.__name__, stand_in)


def _not_served(app) -> None:
    raise RuntimeError(
        "nbgrader_main leaves nbgrader's server extensions out: serve them from "
        "`jupyter lab` or `jupyter server`, not from this process"
    )


def alembic_head() -> str:
    """nbgrader's newest gradebook schema revision (``e43177bfe90b`` in nbgrader 0.9),
    read from its migration scripts as ``alembic heads`` reads them."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


def read_alembic_head_in_process() -> None:
    """Make nbgrader ask `alembic_head` instead of starting ``alembic heads``."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = alembic_head


def command(*args: str) -> list[str]:
    """The command line of ``nbgrader ARGS`` with this Python."""
    return [sys.executable, "-m", "amp_lessons.tooling.grading.nbgrader_main", *args]


if __name__ == "__main__":
    skip_iri_grammar()
    skip_server_extensions()
    read_alembic_head_in_process()
    from nbgrader.apps.nbgraderapp import main

    sys.exit(main())

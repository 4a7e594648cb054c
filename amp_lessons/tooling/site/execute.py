"""Execute the lessons for the site and record what executed them.

Each executed copy carries ``metadata.amp_lessons.executed``: torch version, device,
device name and UTC date, read in the lesson's own kernel after its last cell, so a
page can say what produced its numbers. CI executes each lesson once with
``python -m amp_lessons.tooling.site execute DIR`` and builds from ``DIR``.

Example: ``execute_lessons([Path("notebooks/00_welcome.ipynb")], Path("build/x"))``
writes ``build/x/00_welcome.ipynb`` whose metadata says e.g.
``{"torch": "2.9.1+cpu", "device": "cpu", "device_name": "x86_64", ...}``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import nbformat

CELL_TIMEOUT_S = 180  # nbval's per-cell limit in pyproject.toml
META_KEY = "amp_lessons"

# Run in the lesson's kernel after its last cell, then removed. The device is the one
# the lessons pick by default (amp_lessons.core.device.resolve_device: CUDA, MPS, CPU),
# read with torch alone so the record does not depend on where that module lives.
PROBE = """\
import datetime as _dt, json as _json, platform as _pf, torch as _torch
if _torch.cuda.is_available():
    _dev, _name = "cuda", _torch.cuda.get_device_name()
elif getattr(_torch.backends, "mps", None) and _torch.backends.mps.is_available():
    _dev, _name = "mps", "Apple GPU"
else:
    _dev, _name = "cpu", _pf.processor() or _pf.machine()
    try:  # Linux names the CPU model; platform only its architecture
        with open("/proc/cpuinfo") as _f:
            _name = next(ln.split(":", 1)[1].strip() for ln in _f
                         if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
_now = _dt.datetime.now(_dt.timezone.utc)
print(_json.dumps({"torch": _torch.__version__, "device": _dev, "device_name": _name,
                   "date": _now.strftime("%Y-%m-%d %H:%M UTC")}))
"""


def probe_here() -> dict:
    """What `PROBE` reports, read in this process: for a notebook run by a kernel of
    this very Python (the test suite's student-path kernels)."""
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(PROBE, {})
    return json.loads(printed.getvalue().strip().splitlines()[-1])


def record(nb, info: dict) -> None:
    """Store what executed ``nb`` in its metadata (what `executed_info` reads)."""
    nb.metadata.setdefault(META_KEY, {})["executed"] = dict(info)


def executed_info(nb) -> dict | None:
    """What executed this notebook (see the module docstring), None if unrecorded."""
    return nb.metadata.get(META_KEY, {}).get("executed")


def execute_notebook(path: Path, out_dir: Path) -> Path:
    """Run one lesson in its own folder (so ``results/`` resolves) with a fresh
    ``python3`` kernel, record what ran it, write ``out_dir/<name>``."""
    from nbclient import NotebookClient

    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    probe = nb.cells.pop()
    text = "".join(
        o.get("text", "") for o in probe.outputs if o.output_type == "stream"
    )
    info = json.loads(text.strip().splitlines()[-1])
    info["seconds"] = round(time.perf_counter() - start, 1)
    record(nb, info)
    out = Path(out_dir) / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


def execute_lessons(notebooks: Sequence[Path], out_dir: Path) -> list[Path]:
    """Execute each lesson (one after another: they time themselves) into ``out_dir``.

    The kernel is this Python (its ``python3`` kernelspec put first on JUPYTER_PATH)
    with the course on PYTHONPATH, as for the slides and the grading.
    """
    from nbclient.exceptions import CellExecutionError

    from amp_lessons.tooling.grading.course import jupyter_env

    out_dir = Path(out_dir)
    saved = dict(os.environ)
    os.environ.update(jupyter_env(out_dir / ".kernel"))
    try:
        done = []
        for path in notebooks:
            start = time.perf_counter()
            try:
                done.append(execute_notebook(path, out_dir))
            except CellExecutionError as error:
                # a timing assert can miss on a busy machine: once more, then fail
                print(
                    f"{Path(path).name} failed, running it once more: "
                    f"{str(error).strip().splitlines()[-1][:200]}",
                    flush=True,
                )
                done.append(execute_notebook(path, out_dir))
            print(
                f"executed {Path(path).name} in {time.perf_counter() - start:.0f} s",
                flush=True,
            )
        return done
    finally:
        os.environ.clear()
        os.environ.update(saved)

"""Inside the sandbox: execute one submitted notebook the way ``nbgrader autograde``
does (nbclient, set up as nbgrader's ``Execute`` preprocessor is), in the guarded
kernel, and hand back only the executed notebook.

The grader writes a job (JSON) to this process's stdin: the notebook, where its
support files are, the folder to run in, the evidence FIFO, the key and the cells
the guard needs (see ``sandbox.run_notebook``). The answer is one JSON document,
``{"notebook", "reason", "cell"}``, on the stdout this process started with; the
kernel inherits a log file instead, and this process makes itself non-dumpable, so
the kernel cannot open its file descriptors or memory through /proc. The document
comes signed (HMAC-SHA256 with the job's key, first line) so that nothing else
written to that pipe can pass for it. ``reason`` is
None when every cell ran (a cell that raised is still a normal run: nbgrader scores
it), otherwise why the run stopped (the kernel died, did not start ...) and ``cell``
the index of the cell that was running.

Not covered here: scoring (nbgrader, outside, from the returned notebook).

Example (what ``sandbox.run_notebook`` starts, inside bwrap)::

    python -m amp_lessons.tooling.grading.runner < job.json > result.json
"""

from __future__ import annotations

import ctypes
import hmac
import json
import os
import resource
import shutil
import sys
from pathlib import Path

from amp_lessons.teaching import progress, self_study
from amp_lessons.tooling.grading import guard, nbgrader_main

PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def _not_dumpable() -> None:
    """Same-user processes (the kernel) can no longer ptrace us or open
    /proc/<our pid>/fd or /mem."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _kernelspec(home: Path) -> Path:
    """A Jupyter data dir whose ``python3`` kernel is the guarded one."""
    spec = home / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    sys.executable,
                    "-m",
                    "amp_lessons.tooling.grading.guard",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "Python 3 (graded)",
                "language": "python",
            }
        )
    )
    return home


def _prepare(job: dict) -> Path:
    """The run folder: copies of the support files and the notebook; the guard's
    config in a private folder the guard deletes; the environment the kernel gets."""
    work = Path(job["workdir"])
    work.mkdir(parents=True, exist_ok=True)
    if job.get("input_dir"):
        for item in Path(job["input_dir"]).iterdir():
            if item.suffix == ".ipynb":
                continue
            copy = shutil.copytree if item.is_dir() else shutil.copy
            copy(item, work / item.name)
    (work / job["name"]).write_text(json.dumps(job["notebook"]))
    private = Path(job["private_dir"])
    private.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = private / "guard.json"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(
            {
                k: job[k]
                for k in (
                    "key",
                    "fifo",
                    "workdir",
                    "package_root",
                    "test_cells",
                    "course_cells",
                    "protected",
                )
            },
            f,
        )
    os.environ.update(
        {
            guard.CONFIG_ENV: str(config),
            "JUPYTER_PATH": str(_kernelspec(private / "jupyter")),
            "JUPYTER_RUNTIME_DIR": str(private / "runtime"),
            "JUPYTER_CONFIG_DIR": str(private / "config"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "IPYTHONDIR": str(private / "ipython"),
            "MPLCONFIGDIR": str(private / "matplotlib"),
            progress.ENV: "off",  # a submission's checks are not the learner's own
            self_study.ENV: "0",  # graded by its hidden tests
        }
    )
    return work


# nbgrader's Execute preprocessor (0.9) is nbclient with these settings; the runner
# sets them on nbclient itself, because importing nbgrader.preprocessors loads all of
# nbgrader (its exchange, server extensions, SQLAlchemy): 1.2 s of CPU a submission.
# tests/test_sandbox.py compares every setting with nbgrader's own.
NBGRADER_EXECUTE = {
    "interrupt_on_timeout": True,
    "allow_errors": True,
    "raise_on_iopub_timeout": True,
    "error_on_timeout": {
        "ename": "CellTimeoutError",
        "evalue": "",
        "traceback": [
            "\x1b[0;31mCellTimeoutError\x1b[0m: No reply from kernel before timeout"
        ],
    },
    "display_data_priority": [
        "text/html",
        "application/pdf",
        "text/latex",
        "image/svg+xml",
        "image/png",
        "image/jpeg",
        "text/plain",
    ],
}


def record_error_reply(cell, cell_index: int, execute_reply: dict) -> None:
    """nbgrader's ``Execute.on_cell_executed``: a cell whose reply is an error that
    none of its outputs shows (a timeout, or a hidden traceback) gets that error as
    an output, so that nbgrader scores it as failed."""
    from nbformat import NotebookNode

    content = execute_reply["content"]
    if content["status"] != "error":
        return
    if any(
        output.output_type == "error" and output.ename == content["ename"]
        for output in cell.outputs
    ):
        return
    error = NotebookNode(
        output_type="error",
        ename=content["ename"],
        evalue=content["evalue"],
        traceback=content["traceback"],
    )
    if error.traceback == []:
        error.traceback = ["ERROR: An error occurred while showtraceback was disabled"]
    cell.outputs.append(error)


def notebook_client(nb, work: Path, cell_timeout: int):
    """An nbclient client that runs ``nb`` in ``work`` as nbgrader's Execute would."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    return NotebookClient(
        nb,
        timeout=cell_timeout,
        kernel_manager_class=AsyncKernelManager,
        on_cell_executed=record_error_reply,
        resources={"metadata": {"path": str(work)}},
        **NBGRADER_EXECUTE,
    )


def execute(job: dict) -> dict:
    """Run every cell as nbgrader's Execute does; return the result document."""
    nbgrader_main.skip_iri_grammar()  # 0.9 s of imports per submission
    import nbformat

    nb = nbformat.from_dict(job["notebook"])
    work = _prepare(job)
    running = None
    reason = None
    try:
        client = notebook_client(nb, work, job["cell_timeout"])
        with client.setup_kernel():  # the steps of nbconvert's ExecutePreprocessor
            info = client.wait_for_reply(client.kc.kernel_info())
            nb.metadata["language_info"] = info["content"]["language_info"]
            for index, cell in enumerate(nb.cells):
                running = index
                client.execute_cell(cell, index, store_history=True)
        client.set_widgets_metadata()
        running = None
    except Exception as exc:  # DeadKernelError, a kernel that never started, ...
        reason = f"{type(exc).__name__}: {str(exc).strip()[:300] or 'no message'}"
    return {"notebook": nb, "reason": reason, "cell": running}


def main() -> int:
    _not_dumpable()
    job = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    if job.get("memory_bytes"):
        limit = int(job["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = os.fdopen(os.dup(1), "wb")  # not inherited: dup() sets close-on-exec
    Path(job["private_dir"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    log = os.open(
        Path(job["private_dir"]).parent / "runner.log",
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o600,
    )
    os.dup2(log, 1)
    os.dup2(log, 2)
    document = json.dumps(execute(job)).encode()
    # Signed: bwrap's own init holds this pipe too, and student code can open that
    # process's descriptors through /proc/1/fd; a forged or extended answer fails.
    mac = hmac.new(bytes.fromhex(job["key"]), document, "sha256").hexdigest()
    result.write(mac.encode() + b"\n" + document)
    result.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

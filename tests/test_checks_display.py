"""What a learner sees when a check fails: the table and its hints in at most 15
lines, then one line, never a traceback through amp_lessons (run in a real Jupyter
kernel); the messages of what their function raised; and an answer written above a
leftover ``raise NotImplementedError()`` told apart from the untouched stub."""

import re
import textwrap

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from test_checks_rules import update_with

from amp_lessons.teaching import checks
from amp_lessons.teaching.checks._engine import FAILED_LINES, CheckFailed

ANSI = re.compile(r"\x1b\[[0-9;]*m")

WRONG_UPDATE = update_with(ceiling=True)  # grows past float32's max

# --- in a real kernel: what the notebook shows -------------------------------------

STUDENT_CELLS = {
    "ceiling": """
import math, torch
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000):
    if found_inf:
        return scale * backoff_factor, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return scale, growth_tracker
""",
    "leftover": '''
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000):
    """The dynamic loss-scale rule: returns (new_scale, new_growth_tracker)."""
    if found_inf:
        scale, growth_tracker = scale * backoff_factor, 0
    # YOUR CODE HERE
    raise NotImplementedError()
''',
    "stub": '''
def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000):
    """The dynamic loss-scale rule: returns (new_scale, new_growth_tracker)."""
    # YOUR CODE HERE
    raise NotImplementedError()
''',
    "many_rows": """
import torch
def predict_autocast_dtypes():
    from amp_lessons.teaching.checks import AUTOCAST_OPS
    low = {"cpu": torch.bfloat16, "cuda": torch.float16}
    return {d: {op: low[d] for op in AUTOCAST_OPS} for d in low}
""",
}
TEST_CELLS = {
    "ceiling": "_checks.check_update_rule(update_scale)",
    "leftover": "_checks.check_update_rule(update_scale)",
    "stub": "_checks.check_update_rule(update_scale)",
    "many_rows": "_checks.check_autocast_dtypes(predict_autocast_dtypes)",
}


@pytest.fixture(scope="module")
def shown():
    """{case: (the test cell's text as the notebook shows it, its error output)}."""
    nb = nbformat.v4.new_notebook()
    for name in STUDENT_CELLS:
        nb.cells += [
            nbformat.v4.new_code_cell(STUDENT_CELLS[name]),
            nbformat.v4.new_code_cell(
                "import amp_lessons.teaching.checks as _checks\n"
                "_checks.verify_pristine()\n" + TEST_CELLS[name]
            ),
        ]
    NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3").execute()
    result = {}
    for name, cell in zip(STUDENT_CELLS, nb.cells[1::2], strict=True):
        text = []
        for output in cell.outputs:
            if output.output_type == "stream" and text and text[-1][0] == output.name:
                # a stream sent in pieces is one area in the notebook (JupyterLab
                # merges them): print's text and its newline can come apart
                text[-1] = (output.name, text[-1][1] + output.text)
            elif output.output_type == "stream":
                text.append((output.name, output.text))
            elif output.output_type == "error":
                text.append(("error", "\n".join(output.traceback)))
        errors = [o for o in cell.outputs if o.output_type == "error"]
        # each output is its own area: a stream's last newline opens no line
        text = "\n".join(part.rstrip("\n") for _name, part in text)
        result[name] = (ANSI.sub("", text), errors)
    return result


@pytest.mark.parametrize("name", TEST_CELLS)
def test_a_failed_check_shows_at_most_15_lines_and_no_frame_of_the_package(shown, name):
    text, errors = shown[name]
    assert len(text.splitlines()) <= FAILED_LINES, text
    assert "amp_lessons/" not in text and "_engine" not in text
    assert "Traceback" not in text and "File " not in text
    # still an AssertionError to nbgrader: one error output, the table above it
    (error,) = errors
    assert error.ename == "AssertionError" and error.evalue
    assert ANSI.sub("", error.traceback[-1]).startswith("AssertionError: ")


def test_what_the_learner_reads_in_the_kernel(shown):
    ceiling, _ = shown["ceiling"]
    assert "the scale is stored in float32" in " ".join(ceiling.split())
    assert ceiling.splitlines()[-1] == (
        "AssertionError: 1 of 8 cases failed — see the hint above"
    )
    leftover, _ = shown["leftover"]
    assert "delete that line" in leftover and "not attempted" not in leftover
    assert "(line 7 of the cell)" in " ".join(leftover.split())
    stub, _ = shown["stub"]
    assert stub.startswith("not attempted: update_scale() still raises")
    assert stub.splitlines()[-1] == "AssertionError: not attempted (see above)"
    many, _ = shown["many_rows"]
    assert "more failing:" in many or "cases passed)" in many
    assert "runs in the dtype of its input" in " ".join(many.split())


def test_check_failed_is_an_assertion_error_rendered_as_one_line(capsys):
    with pytest.raises(CheckFailed) as failed:
        checks.check_update_rule(WRONG_UPDATE)
    assert isinstance(failed.value, AssertionError)
    assert failed.value._render_traceback_() == [
        "\x1b[0;31mAssertionError\x1b[0m: 1 of 8 cases failed — see the hint above"
    ]
    out = capsys.readouterr().out
    assert "FAIL" in out and len(out.splitlines()) < FAILED_LINES


# --- what the learner's function raised ---------------------------------------------


def _failed_output(check, fn, capsys) -> str:
    with pytest.raises(AssertionError):
        check(fn)
    return " ".join(capsys.readouterr().out.split())


def test_an_assert_without_a_message_shows_its_line(capsys):
    # compiled as a cell is, not by pytest (which gives asserts a message)
    update_scale = _defined(
        "def update_scale(scale, tracker, found_inf, *args, **kwargs):\n"
        "    assert scale < 1000\n"
        "    return scale, tracker\n",
        "update_scale",
    )
    out = _failed_output(checks.check_update_rule, update_scale, capsys)
    assert (
        "your function raised AssertionError at `assert scale < 1000`, "
        "with no message" in out
    )


def test_an_assertion_message_is_shown(capsys):
    def update_scale(scale, tracker, found_inf, *args, **kwargs):
        assert scale < 1000, f"scale {scale} too big"
        return scale, tracker

    out = _failed_output(checks.check_update_rule, update_scale, capsys)
    assert "your function raised AssertionError: scale 65536.0 too big" in out


def test_torchs_own_message_is_marked_as_torchs(capsys):
    def unscale_grads(grads, scale):
        for g in grads:
            g.mul_(torch.ones(3))  # broadcasting fails inside torch
        return False

    out = _failed_output(checks.check_unscale, unscale_grads, capsys)
    assert "torch raised RuntimeError at `g.mul_(torch.ones(3))`; torch's message:" in (
        out
    )
    assert "must match the size of tensor b (3)" in out


def test_torch_raising_from_its_python_code_is_marked_too(capsys):
    def amp_train_step(model, optimizer, scaler, x, y, max_norm):
        optimizer.zero_grad(set_to_none=True)
        with torch.amp.autocast(x.device.type, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.unscale_(optimizer)  # twice: torch/amp/grad_scaler.py raises
        return loss.item()

    out = _failed_output(checks.check_amp_train_step, amp_train_step, capsys)
    # lesson 05's grader names the fault from the calls it recorded, and gives
    # torch's own words after it
    assert "(The error: RuntimeError: unscale_() has already been called" in out


def test_an_empty_not_implemented_error_from_a_helper_says_what_it_means(capsys):
    def helper(x):
        raise NotImplementedError()

    def decode_fp16(bits):
        return helper(bits)

    out = _failed_output(checks.check_decode_fp16, decode_fp16, capsys)
    assert (
        "your function raised NotImplementedError at `raise NotImplementedError()`: "
        "a function it calls is not written yet (it is still a stub)" in out
    )


# --- an answer above a leftover stub line is not "not attempted" ----------------------


def _defined(source: str, name: str):
    """A function compiled from `source` as a notebook cell is (linecache knows it)."""
    import linecache

    filename = f"<cell-{abs(hash(source))}>"
    source = textwrap.dedent(source)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    space = {}
    exec(compile(source, filename, "exec"), space)
    return space[name]


@pytest.mark.parametrize(
    "body",
    [
        # written between nbgrader's marker and the raise
        """
            # YOUR CODE HERE
            sign = -1.0 if bits >> 15 else 1.0
            raise NotImplementedError()
        """,
        # the marker replaced by the answer
        """
            sign = -1.0 if bits >> 15 else 1.0
            raise NotImplementedError()
        """,
        # the raise left inside the learner's own branch
        """
            if bits >= 0:
                raise NotImplementedError()
            return 0.0
        """,
    ],
    ids=["below-the-marker", "marker-replaced", "inside-a-branch"],
)
def test_an_answer_above_a_leftover_raise_is_told_to_delete_it(body, capsys):
    source = 'def decode_fp16(bits):\n    """doc"""\n' + textwrap.indent(
        textwrap.dedent(body).strip("\n"), "    "
    )
    fn = _defined(source, "decode_fp16")
    with pytest.raises(AssertionError, match="the case failed"):
        checks.check_decode_fp16(fn)
    out = " ".join(capsys.readouterr().out.split())
    assert "not attempted" not in out and "delete that line" in out
    assert "leftover `raise NotImplementedError()`" in out


@pytest.mark.parametrize(
    "source",
    [
        'def decode_fp16(bits):\n    """doc"""\n    # YOUR CODE HERE\n'
        "    raise NotImplementedError()\n",
        "def decode_fp16(bits):\n    raise NotImplementedError()\n",
        # the entry lesson's form: given lines around nbgrader's stub
        "def decode_fp16(bits):\n    sign = bits >> 15\n    # YOUR CODE HERE\n"
        "    raise NotImplementedError()\n    return sign\n",
    ],
    ids=["docstring", "bare", "given-lines"],
)
def test_the_untouched_stub_is_still_not_attempted(source, capsys):
    fn = _defined(source, "decode_fp16")
    with pytest.raises(AssertionError, match="not attempted"):
        checks.check_decode_fp16(fn)
    assert capsys.readouterr().out.startswith("not attempted: decode_fp16()")


def test_without_source_the_code_object_decides(capsys):
    space = {}
    exec("def stub(bits):\n    raise NotImplementedError()\n", space)
    exec(
        "def written(bits):\n    x = abs(bits)\n    raise NotImplementedError()\n",
        space,
    )
    with pytest.raises(AssertionError, match="not attempted"):
        checks.check_decode_fp16(space["stub"])
    with pytest.raises(AssertionError, match="the case failed"):
        checks.check_decode_fp16(space["written"])
    assert "delete that line" in " ".join(capsys.readouterr().out.split())

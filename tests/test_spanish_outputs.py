"""The check that English reaches no Spanish student (tests/spanish_outputs.py): what
it counts, and a Spanish notebook with an English print planted in it failing, run as
make test runs a Spanish lesson."""

import nbformat
from spanish_outputs import (
    comma_numbers,
    english_lines,
    notebook_verdict,
    output_lines,
    reads_as_english,
)
from student_paths import SVG_TEXT_FIGURES, run_in_one_kernel


def test_a_line_of_english_prose_is_told_from_spanish_and_from_code():
    assert reads_as_english("weight gradients that are 0: 12 of 64")
    assert reads_as_english("the scale is halved after an overflow")
    assert not reads_as_english("gradientes de los pesos que son 0: 12 de 64")
    assert not reads_as_english("la escala se reduce a la mitad tras un desbordamiento")
    assert reads_as_english("fp16 max 6.6e+04") is None  # three words: not prose
    assert reads_as_english("    return scaler.scale(loss) if the loss is not") is None
    assert reads_as_english("x = the_loss_of(the, step, in, fp16)") is None
    assert reads_as_english("(c) Tanto loss.backward() como scaler.scale(loss)") is None
    assert not reads_as_english("check_quick_check[step_with_inf]: 1 caso de la prueba")
    assert (
        reads_as_english("$ python -m amp_lessons train --steps 40 --log-every 10")
        is None
    )


def test_printed_source_and_torchs_messages_are_left_out():
    source = (
        'def step(x):\n    """Return the loss of the step, in fp32."""\n    return x\n'
    )
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": source},
        {
            "output_type": "stream",
            "name": "stderr",
            "text": "UserWarning: the scheduler was called before the step\n",
        },
        {
            "output_type": "stream",
            "name": "stdout",
            "text": "RuntimeError: step() has already been called since the last "
            "update().\nthe loss of the step is the same\n",
        },
    ]
    assert [line.strip() for line in output_lines(outputs)] == [
        "the loss of the step is the same"
    ]
    # the source, then what the cell printed after it, in one stream
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": source + "the end\n"}
    ]
    assert output_lines(outputs) == ["the end"]


def test_figures_and_html_are_read_too():
    svg = (
        '<svg><g><text x="1" style="font">loss of the run in fp16</text>'
        "<text>pérdida de la ejecución en fp16</text></g></svg>"
    )
    outputs = [
        {
            "output_type": "display_data",
            "data": {
                "image/svg+xml": svg,
                "image/png": "...",
                "text/plain": "<Figure size 640x480 with 1 Axes>",
            },
        },
        {
            "output_type": "display_data",
            "data": {
                "text/html": "<table><tr><td>the steps that were skipped</td>"
                "</tr></table>",
                "text/plain": "x",
            },
        },
    ]
    lines = [line.strip() for line in output_lines(outputs) if line.strip()]
    assert lines == [
        "loss of the run in fp16",
        "pérdida de la ejecución en fp16",
        "the steps that were skipped",
    ]  # no "<Figure size ...>"
    english, prose = english_lines(outputs)
    assert [line.strip() for line in english] == [
        "loss of the run in fp16",
        "the steps that were skipped",
    ]
    assert prose == 3


SPANISH_CELL = (
    'for i in range(3):\n    print(f"paso {i}: la escala de la pérdida sigue en 65536")'
)


def run_as_make_test_does(tmp_path, cells: list[str]) -> str | None:
    """A Spanish notebook of ``cells``, run as make test runs a Spanish lesson (the
    second pass of a kernel, its figures drawn as SVG with real text too), and the
    check's verdict on what it showed."""
    spanish = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in cells]
    )
    run = run_in_one_kernel(
        [nbformat.v4.new_notebook(), spanish],
        tmp_path,
        before_pass={2: SVG_TEXT_FIGURES},
    )
    assert run.errors() == []
    return notebook_verdict("00_leccion.ipynb", spanish)


def test_a_spanish_lesson_passes_and_a_planted_english_print_fails_it(tmp_path):
    assert run_as_make_test_does(tmp_path, [SPANISH_CELL]) is None
    planted = run_as_make_test_does(
        tmp_path,
        [
            SPANISH_CELL,
            'print("the weights stay in fp32 while the activations shrink")',
        ],
    )
    assert "1 of 4 output lines read as English" in planted
    assert "the weights stay in fp32 while the activations shrink" in planted


def test_an_english_plot_title_fails_a_spanish_lesson(tmp_path):
    plot = (
        "import matplotlib.pyplot as plt\n%matplotlib inline\n"
        "fig, ax = plt.subplots()\nax.plot([1, 2])\n"
        "ax.set_title('the loss of the run in fp16')\nplt.show()"
    )
    found = run_as_make_test_does(tmp_path, [SPANISH_CELL, plot])
    assert found and "the loss of the run in fp16" in found


def test_a_number_with_a_comma_separator_is_caught():
    """131,072 reads as 131 point 072 to a Spanish reader; a Python list's commas,
    decimals and three-digit numbers are no such number."""

    def stream(text):
        return [{"output_type": "stream", "name": "stdout", "text": text}]

    assert comma_numbers(stream("se guardan 131,072 B\n")) == ["se guardan 131,072 B"]
    assert comma_numbers(stream("reduce el paso 65,536x\n"))
    assert comma_numbers(stream("GradScaler 12 us por paso\n"))
    for fine in (
        "se guardan 131072 B",
        "torch.Size([1024, 1024]) y (1, 024)",
        "error 0.125, 1.5e-05, [3, 4]",
        "GradScaler 12 µs por paso",
    ):
        assert comma_numbers(stream(fine + "\n")) == [], fine


def test_a_comma_number_fails_a_spanish_lesson(tmp_path):
    found = run_as_make_test_does(
        tmp_path, [SPANISH_CELL, 'print(f"se guardan {131072:,} B")']
    )
    assert found and "se guardan 131,072 B" in found and "the English way" in found

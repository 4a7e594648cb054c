"""What ``torch.amp.autocast`` does to each op, measured live on the installed torch.

Notebook 04's op table. Autocast keeps three lists per device: ops that run in the
low-precision dtype (matmul-like), ops that run in fp32 (losses and, on CUDA, softmax,
norms and many reductions), and ops that take the widest input dtype (``cat``). Every
other op simply follows its inputs. The lists differ between CPU and CUDA and between
torch versions, so nothing here is typed in: ``autocast_dtype_table`` runs each op on
tiny tensors and records what came out. The rest of notebook 04 (dtypes through a
model, nested regions, custom functions, inserted casts) is ``autocast_demos``.

Not covered here: ``torch.compile`` (it traces autocast into the graph), autocast on
MPS/XPU (the same API, other op lists), fp8 (not part of autocast).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from amp_lessons.core.device import device_present
from amp_lessons.i18n import _

# What autocast did to an op, as inferred from two runs (see ``_category``).
LOW = "lower precision"  # runs in the autocast dtype even with fp32 inputs
FP32 = "fp32"  # runs in fp32 even with low-precision inputs
WIDEST = "widest input"  # mixed inputs: the result takes the widest dtype
FOLLOWS = "follows input"  # autocast leaves the op alone
ERROR = "error"  # the op raised under autocast
CATEGORIES = (LOW, FP32, WIDEST, FOLLOWS, ERROR)

AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)

_SHORT = {
    torch.float64: "fp64",
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
}


def short_dtype(dtype: torch.dtype | None) -> str:
    """The course's short name of a dtype. Example: ``short_dtype(torch.bfloat16)``
    -> ``"bf16"``; ``None`` (the op raised) -> ``"-"``."""
    if dtype is None:
        return "-"
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


# ---------------------------------------------------------------------------
# The op table
# ---------------------------------------------------------------------------


class _Inputs:
    """Makes the tiny input tensors of one probe and remembers their float dtypes.

    ``t(2, 3)`` is fp32 (or the autocast dtype in the all-low probe);
    ``t(2, 3, low=True)`` is always in the autocast dtype; ``t.index(3, 2)`` is an
    int64 class index tensor (targets), not recorded.
    """

    def __init__(
        self, device: torch.device | str, low_dtype: torch.dtype, all_low: bool
    ):
        self.device, self.low_dtype, self.all_low = device, low_dtype, all_low
        self.dtypes: list[torch.dtype] = []

    def __call__(self, *shape: int, low: bool = False) -> torch.Tensor:
        dtype = self.low_dtype if (low or self.all_low) else torch.float32
        self.dtypes.append(dtype)
        # uniform in [0, 1): valid for every op below, probabilities for BCE included
        return torch.rand(*shape, device=self.device).to(dtype)

    def index(self, high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, device=self.device)


# A curated list of common ops, in teaching order, each on tiny tensors (why tiny:
# amp_lessons.core.device.EMULATION_NOTE).
OPS: dict[str, Callable[[_Inputs], torch.Tensor]] = {
    # matmul-like: autocast's lower-precision list on both CPU and CUDA
    "matmul": lambda t: torch.matmul(t(2, 3), t(3, 4)),
    "mm": lambda t: torch.mm(t(2, 3), t(3, 4)),
    "bmm": lambda t: torch.bmm(t(1, 2, 3), t(1, 3, 4)),
    "addmm": lambda t: torch.addmm(t(2, 4), t(2, 3), t(3, 4)),
    "baddbmm": lambda t: torch.baddbmm(t(1, 2, 4), t(1, 2, 3), t(1, 3, 4)),
    "linear": lambda t: F.linear(t(2, 3), t(4, 3), t(4)),
    "conv1d": lambda t: F.conv1d(t(1, 2, 5), t(3, 2, 3)),
    "conv2d": lambda t: F.conv2d(t(1, 2, 4, 4), t(3, 2, 3, 3)),
    "scaled_dot_product_attention": lambda t: F.scaled_dot_product_attention(
        t(1, 2, 4), t(1, 2, 4), t(1, 2, 4)
    ),
    # elementwise
    "relu": lambda t: F.relu(t(2, 3)),
    "gelu": lambda t: F.gelu(t(2, 3)),
    "add": lambda t: torch.add(t(2, 3), t(2, 3)),
    "mul": lambda t: torch.mul(t(2, 3), t(2, 3)),
    "exp": lambda t: torch.exp(t(2, 3)),
    "pow": lambda t: torch.pow(t(2, 3), 2),
    # mixed inputs: one fp32, one already low precision
    "cat": lambda t: torch.cat([t(2, 3), t(2, 3, low=True)]),
    # softmax and normalisation
    "softmax": lambda t: F.softmax(t(2, 3), dim=-1),
    "log_softmax": lambda t: F.log_softmax(t(2, 3), dim=-1),
    "layer_norm": lambda t: F.layer_norm(t(2, 3), (3,)),
    # reductions
    "sum": lambda t: torch.sum(t(2, 3)),
    "mean": lambda t: torch.mean(t(2, 3)),
    "cumsum": lambda t: torch.cumsum(t(2, 3), dim=0),
    "prod": lambda t: torch.prod(t(2, 3)),
    # losses
    "mse_loss": lambda t: F.mse_loss(t(2, 3), t(2, 3)),
    "l1_loss": lambda t: F.l1_loss(t(2, 3), t(2, 3)),
    "cross_entropy": lambda t: F.cross_entropy(t(2, 3), t.index(3, 2)),
    "nll_loss": lambda t: F.nll_loss(t(2, 3), t.index(3, 2)),
    "binary_cross_entropy": lambda t: F.binary_cross_entropy(t(2, 3), t(2, 3)),
    "binary_cross_entropy_with_logits": lambda t: F.binary_cross_entropy_with_logits(
        t(2, 3), t(2, 3)
    ),
}


@dataclass(frozen=True)
class AutocastRow:
    """One op measured under autocast.

    ``inputs``/``output``: the float input dtypes of the main run (fp32, or fp32 mixed
    with the autocast dtype for ``cat``) and the output dtype it gave (None: raised).
    ``low_inputs_output``: the output dtype when every input is already in the autocast
    dtype, which tells "runs in fp32" apart from "follows its input".
    """

    op: str
    inputs: tuple[torch.dtype, ...]
    output: torch.dtype | None
    low_inputs_output: torch.dtype | None
    category: str
    error: str = ""


def validate_autocast_args(device_type: str, dtype: torch.dtype) -> None:
    """Raise ValueError unless autocast supports ``dtype`` on ``device_type``."""
    try:
        available = torch.amp.is_autocast_available(device_type)
    except (RuntimeError, TypeError):  # not a device name torch knows at all
        available = False
    if not isinstance(device_type, str) or not available:
        raise ValueError(
            f"autocast is not available for device_type={device_type!r}; "
            "use 'cpu' or 'cuda' (a string, like tensor.device.type)"
        )
    if dtype not in AUTOCAST_DTYPES:
        raise ValueError(
            f"autocast dtype must be torch.bfloat16 or torch.float16, got {dtype}"
        )


@contextmanager
def _forced_autocast(device_type: str, dtype: torch.dtype) -> Iterator[None]:
    # torch.amp.autocast("cuda") switches itself off (with a warning) when no GPU is
    # present; on fake tensors we want CUDA's real dispatch rules, so set the
    # thread-local state the same way autocast.__enter__/__exit__ do.
    prev = (
        torch.is_autocast_enabled(device_type),
        torch.get_autocast_dtype(device_type),
    )
    torch.set_autocast_enabled(device_type, True)
    torch.set_autocast_dtype(device_type, dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(device_type, prev[0])
        torch.set_autocast_dtype(device_type, prev[1])


@contextmanager
def autocast_rules(device_type: str, dtype: torch.dtype) -> Iterator[None]:
    """Autocast to ``dtype`` on ``device_type``, on fake tensors if there is no device.

    Make the tensors inside, on ``device_type``. With the device present they are real
    and this is ``torch.amp.autocast``; without it they are fake
    (``FakeTensorMode``: shapes and dtypes, no data), and ops on them still go through
    the device's real autocast kernels.

    Example, on a machine without a GPU::

        with autocast_rules("cuda", torch.float16):
            a = torch.ones(2, 2, device="cuda")
            (a @ a).dtype, torch.softmax(a, -1).dtype  # float16, float32
    """
    validate_autocast_args(device_type, dtype)
    if device_present(device_type):
        with torch.amp.autocast(device_type, dtype=dtype):
            yield
        return
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), _forced_autocast(device_type, dtype):
        yield


def error_line(exc: BaseException) -> str:
    """``"TypeName: first line of the message"``, how the tables show an error."""
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text.splitlines()[0]}"


def _probe(
    fn: Callable[[_Inputs], torch.Tensor],
    device_type: str,
    dtype: torch.dtype,
    all_low: bool,
    fake: bool,
):
    t = _Inputs(device_type, dtype, all_low)
    ctx = (
        _forced_autocast(device_type, dtype)
        if fake
        else torch.amp.autocast(device_type, dtype=dtype)
    )
    try:
        with ctx:
            out = fn(t)
    except Exception as exc:  # the error text is the result for this op
        return tuple(t.dtypes), None, error_line(exc)
    return tuple(t.dtypes), out.dtype, ""


def _category(inputs, output, low_output, dtype, error) -> str:
    if error:
        return ERROR
    if output == dtype:
        return LOW
    if low_output == torch.float32:
        return FP32
    if len(set(inputs)) > 1 and output == torch.promote_types(*set(inputs)):
        return WIDEST
    if output == torch.float32 and low_output == dtype:
        return FOLLOWS
    return f"other ({short_dtype(output)} / {short_dtype(low_output)})"


def measure_op(
    op: str,
    device_type: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    fake: bool = False,
) -> AutocastRow:
    """Run one op of ``OPS`` under autocast twice (fp32 inputs, low inputs) and
    classify it.

    Example: ``measure_op("mm").output`` -> ``torch.bfloat16`` (category
    ``"lower precision"``); ``measure_op("cross_entropy").low_inputs_output`` ->
    ``torch.float32`` (category ``"fp32"``).
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose one of {sorted(OPS)}")
    fn = OPS[op]
    inputs, output, error = _probe(fn, device_type, dtype, all_low=False, fake=fake)
    _, low_output, low_error = _probe(fn, device_type, dtype, all_low=True, fake=fake)
    if low_error and not error:
        error = f"with {short_dtype(dtype)} inputs: {low_error}"
    category = _category(inputs, output, low_output, dtype, error)
    return AutocastRow(op, inputs, output, low_output, category, error)


def autocast_dtype_table(
    device_type: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    ops: list[str] | None = None,
    fake: bool | None = None,
) -> list[AutocastRow]:
    """Measure what autocast does to each op of ``OPS`` on this torch.

    Each op runs on tiny random tensors under ``torch.amp.autocast(device_type,
    dtype=dtype)``; ops that raise are recorded with their error text.

    ``fake``: run on fake tensors (``torch._subclasses.FakeTensorMode``: shapes and
    dtypes only, no data, no device needed), which still goes through the device's
    real autocast kernels. Default: only when ``device_type`` is not available here,
    so the CUDA table can be read from a CPU-only torch.

    Example (torch 2.13, CPU, bf16): ``matmul`` -> bf16 ("lower precision"),
    ``relu`` -> fp32 ("follows input"), ``cross_entropy`` -> fp32 even on bf16 inputs
    ("fp32"), ``cat`` of fp32 and bf16 -> fp32 ("widest input").
    """
    validate_autocast_args(device_type, dtype)
    ops = list(OPS) if ops is None else ops
    if fake is None:
        fake = not device_present(device_type)
    if not fake and not device_present(device_type):
        raise RuntimeError(
            f"no {device_type} device here; pass fake=True to read {device_type}'s "
            "autocast rules on fake tensors"
        )
    if not fake:
        return [measure_op(op, device_type, dtype) for op in ops]
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return [measure_op(op, device_type, dtype, fake=True) for op in ops]


def rows_by_op(rows: list[AutocastRow]) -> dict[str, AutocastRow]:
    """Index a table by op name. Example: ``rows_by_op(table)["mm"].category``."""
    return {row.op: row for row in rows}


def compare_tables(
    a: list[AutocastRow], b: list[AutocastRow]
) -> list[tuple[str, str, str]]:
    """Ops whose category differs between two tables: ``(op, category_a,
    category_b)``.

    Example: CPU vs CUDA, bf16/fp16, torch 2.13: ``("softmax", "follows input",
    "fp32")`` is among them.
    """
    other = rows_by_op(b)
    return [
        (row.op, row.category, other[row.op].category)
        for row in a
        if row.op in other and other[row.op].category != row.category
    ]


def format_autocast_table(
    rows: list[AutocastRow], dtype: torch.dtype | None = None
) -> str:
    """A plain-text table of ``rows`` (errors listed under it, first line only)."""
    low = short_dtype(dtype) if dtype is not None else "low"
    header = ("op", "inputs", "output", f"{low} inputs ->", "category")
    lines = [
        [
            row.op,
            ", ".join(short_dtype(d) for d in row.inputs),
            short_dtype(row.output),
            short_dtype(row.low_inputs_output),
            row.category,
        ]
        for row in rows
    ]
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]

    def fmt(cells):
        return "  ".join(
            c.ljust(w) for c, w in zip(cells, widths, strict=True)
        ).rstrip()

    out = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in lines]
    errors = [f"  {row.op}: {row.error}" for row in rows if row.error]
    if errors:
        out += ["", "errors:", *errors]
    return "\n".join(out)


_COLOURS = {
    LOW: "#d6eaff",
    FP32: "#ffe3c2",
    WIDEST: "#e8dcff",
    FOLLOWS: "#eeeeee",
    ERROR: "#ffc9c9",
}


def table_html(
    rows: list[AutocastRow], dtype: torch.dtype | None = None, title: str = ""
) -> str:
    """The same table as HTML (no pandas), one colour per category; show it with
    ``IPython.display.HTML(table_html(rows))``."""
    low = short_dtype(dtype) if dtype is not None else "low"
    headers = (
        "op",
        _("inputs"),
        _("output"),
        _("{low} inputs &rarr;").format(low=low),
        _("category"),
    )
    head = "".join(f"<th style='text-align:left'>{h}</th>" for h in headers)
    body = []
    for row in rows:
        colour = _COLOURS.get(row.category, "#ffffff")
        category = html.escape(row.category)
        if row.error:
            category += f"<br><small>{html.escape(row.error[:160])}</small>"
        cells = [
            f"<code>{row.op}</code>",
            ", ".join(short_dtype(d) for d in row.inputs),
            f"<b>{short_dtype(row.output)}</b>",
            short_dtype(row.low_inputs_output),
            category,
        ]
        body.append(
            f"<tr style='background:{colour};color:#000'>"
            + "".join(f"<td style='text-align:left'>{c}</td>" for c in cells)
            + "</tr>"
        )
    caption = f"<caption>{html.escape(title)}</caption>" if title else ""
    return (
        f"<table>{caption}<thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def run_under_autocast(
    fn: Callable[[], torch.Tensor],
    device_type: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
) -> tuple[torch.dtype | None, str]:
    """``(output dtype, "")`` of ``fn()`` run under autocast, or ``(None, error)``.

    Example: ``run_under_autocast(lambda: torch.ones(2, 2) @ torch.ones(2, 2))``
    -> ``(torch.bfloat16, "")``.
    """
    validate_autocast_args(device_type, dtype)
    try:
        with torch.amp.autocast(device_type, dtype=dtype):
            return fn().dtype, ""
    except RuntimeError as exc:
        return None, error_line(exc)

"""Lesson 09's graders: the GAN step with one scaler, and the first overflowing module.

``check_gan_step`` runs the student's GAN iteration for a few iterations next to
``amp_lessons.teaching.practice.gan_step`` (fresh seeded models, a real scaler, scripted
overflows in one network) and compares every parameter and optimizer state bit for
bit, the scale and the losses (a step that calls ``practice.gan_step`` itself fails);
a wrong run's hint comes from what the step did (the calls ``RecordingScaler`` saw
for each network): it names the fault and why, never the line.
``check_first_overflow`` asks for the name of the first module whose output holds
inf/nan under fp16 autocast, found with forward hooks the student writes, on models
built to trip the usual shortcuts (leaves only, the last inf
instead of the first, fp32 outputs); a function that calls ``amp_lessons.core.nan_hunt``
(whose detector is the answer) is a wrong answer.
Both call the student's function defensively and run their references with grad mode
on, float32 as the default dtype and their own random state.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from amp_lessons.core import nan_hunt
from amp_lessons.core.scaler import LossScaler
from amp_lessons.i18n import N_, _
from amp_lessons.teaching import practice
from amp_lessons.teaching.checks._engine import (
    NotAttempted,
    Raised,
    Row,
    call_student,
    cut,
    let_interrupt_through,
    show_value,
)
from amp_lessons.teaching.checks._engine import grade as _grade
from amp_lessons.teaching.checks._gan_faults import gan_fault_hint
from amp_lessons.teaching.checks._recording import RecordingScaler
from amp_lessons.teaching.clinic import RunInFp32
from amp_lessons.teaching.scaler_vs_torch import first_difference

__all__ = ["check_first_overflow", "check_gan_step"]


@contextlib.contextmanager
def _fixed_state() -> Iterator[None]:
    """Grad mode on and float32 as the default dtype, whatever the notebook (or the
    student's last call) left; restored afterwards."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.enable_grad():
            yield
    finally:
        torch.set_default_dtype(dtype)


def _call(fn: Callable, *args: Any, answers: tuple[Callable, ...] = ()) -> Any:
    """``call_student``, and ``Raised`` also for the BaseExceptions a function may
    raise (SystemExit from sys.exit(), GeneratorExit); Ctrl-C still stops."""
    try:
        with _fixed_state():
            return call_student(fn, *args, answers=answers)
    except NotAttempted:
        raise
    except (SystemExit, GeneratorExit) as exc:
        return Raised(exc)


def _show(value: Any, width: int = 24) -> str:
    """repr for a table cell, even of an object whose repr raises (or exits)."""
    if isinstance(value, Raised):
        return cut(str(value), width)  # "raised SystemExit", "called gan_step"
    return show_value(value, width)


# ---- check_gan_step ----------------------------------------------------------------


@dataclass(frozen=True)
class _GanCase:
    name: str
    num_steps: int
    overflow: dict[int, str] = field(default_factory=dict)
    init_scale: float = 2.0**10
    growth_interval: int = 2
    fused: bool = False
    ours: bool = False  # amp_lessons' LossScaler instead of torch's GradScaler


_GAN_CASES = (
    _GanCase(N_("3 iterations, growth_interval 2"), 3),
    _GanCase(N_("D overflows at iteration 2"), 3, {2: "d"}),
    _GanCase(N_("G overflows at iteration 2"), 3, {2: "g"}),
)
_GAN_HIDDEN = (
    _GanCase(N_("growth_interval 1, 4 iterations"), 4, growth_interval=1),
    _GanCase(N_("fused Adam, D then G overflow"), 4, {2: "d", 3: "g"}, fused=True),
    _GanCase(N_("LossScaler, G overflows at 3"), 4, {3: "g"}, 2.0**12, 3, ours=True),
)


class _Broken(Raised):
    """The run could not go on after the student's step: the grader's own reading of
    the models or optimizers failed."""

    @property
    def hint(self) -> str:
        return _(
            "after your step the models or optimizers could not be read "
            "({name}: {message}); change only what a step "
            "changes: gradients, parameters through the optimizers, the scaler"
        ).format(name=type(self.exc).__name__, message=self.exc)


class _Stop(Exception):
    """The student's step raised or returned something unusable: end the run."""

    def __init__(self, got: Any) -> None:
        super().__init__()
        self.got = got


def _pair(got: Any) -> tuple[float, float] | None:
    """``(d_loss, g_loss)`` as floats, or None if ``got`` is not two numbers."""
    try:
        if isinstance(got, (tuple, list)) and len(got) == 2:
            values = []
            for value in got:
                if isinstance(value, bool):
                    return None
                if isinstance(value, torch.Tensor):  # floats, as the spec asks
                    return None
                values.append(float(value))
            return values[0], values[1]
    except BaseException as exc:  # a __float__ or __len__ that raises (or exits)
        let_interrupt_through(exc)  # is just a wrong answer
        return None
    return None


def _run_gan(
    step: Callable, case: _GanCase, student: bool, trace: list | None = None
) -> Any:
    """The ``practice.GanRun`` of ``case`` with ``step``, or what went wrong. With
    ``trace`` (a list), torch's scaler is a `RecordingScaler` and each iteration's
    calls are appended to it."""
    recording = trace is not None and not case.ours

    def guarded(*args: Any) -> tuple[float, float]:
        if recording:
            if not trace:  # the first iteration: the models and optimizers exist now
                scaler.watch(args[1], args[3], "d")
                scaler.watch(args[0], args[2], "g")
            scaler.calls, scaler.scaled = [], []
        # a student's step that calls the package's own gan_step (by any name) is no
        # answer: call_student makes that case a failure with its hint
        got = (
            _call(step, *args, answers=(practice.gan_step,)) if student else step(*args)
        )
        if recording:
            calls = scaler.calls  # the student's code can reach it: names only
            trace.append(
                [c for c in calls if type(c) is str] if type(calls) is list else []
            )
        if isinstance(got, Raised):
            raise _Stop(got)
        pair = _pair(got)
        if pair is None:
            raise _Stop(("wrong type", got))
        if recording and _scaled_pair(pair, scaler):
            trace[-1].append("returned_scaled")
        return pair

    cls = LossScaler if case.ours else RecordingScaler if recording else (
        torch.amp.GradScaler)  # fmt: skip
    scaler = cls("cpu", init_scale=case.init_scale,
                 growth_interval=case.growth_interval)  # fmt: skip
    with _fixed_state(), torch.random.fork_rng(devices=[]):
        try:
            return practice.train_gan(
                scaler,
                case.num_steps,
                step_fn=guarded,
                fused=case.fused,
                overflow=case.overflow,
            )
        except _Stop as stop:
            return stop.got
        except NotAttempted:
            raise
        except Exception as exc:  # the models were left unusable by the step
            return _Broken(exc)


def _scaled_pair(pair: tuple[float, float], scaler: RecordingScaler) -> bool:
    """Whether a returned loss is one the scaler's scale returned (scale > 1)."""
    if type(scaler.scaled) is not list:  # the step can reach it
        return False
    scaled = {t.float().item() for t in scaler.scaled
              if type(t) is torch.Tensor and t.numel() == 1}  # fmt: skip
    return any(value in scaled for value in pair if value != 0.0)


def _same_gan(a: Any, b: Any) -> bool:
    if not isinstance(a, practice.GanRun) or not isinstance(b, practice.GanRun):
        return False
    close = all(
        math.isclose(x, y, rel_tol=1e-6) or (math.isnan(x) and math.isnan(y))
        for x, y in zip(a.d_losses + a.g_losses, b.d_losses + b.g_losses, strict=True)
    )
    return close and first_difference(a.history, b.history) is None


def _describe_gan(run: Any) -> str:
    if isinstance(run, practice.GanRun):
        scales = ", ".join(f"{s:g}" for s in run.scales)
        return _("scales {scales}").format(scales=scales)
    if isinstance(run, tuple):  # ("wrong type", value)
        return _("returned {value}").format(value=_show(run[1], 14))
    return _show(run)


def _or(hints: list[str]) -> str:
    """Every hint that fits, in the table's language: "A. Or: B"."""
    return f". {_('Or:')} ".join(hints)


def _gan_hint(got: Any, trace: list[list[str]]) -> str:
    if isinstance(got, tuple):
        return _(
            "return the two losses as Python floats, (d_loss, g_loss): a loss "
            "tensor keeps its autograd graph, and the activations saved for "
            "backward, alive for as long as the caller holds it; got {value}"
        ).format(value=_show(got[1], 40))
    raised = isinstance(got, Raised) and not isinstance(got, _Broken)
    hint = gan_fault_hint(trace, finished=not isinstance(got, Raised))
    if hint and raised:  # the error's own words too, its first sentence
        said = got.message.split(". ")[0].strip().rstrip(".")
        error = f"{type(got.exc).__name__}: {said}." if said else str(got)
        return hint + " " + _("(The error: {error})").format(error=cut(error, 120))
    if isinstance(got, Raised):
        return got.hint
    if hint:
        return hint
    if not trace:  # amp_lessons' own scaler: its calls were not recorded
        return _(
            "the weights, the scale or the losses differ from torch's with "
            "amp_lessons' LossScaler as the scaler: your iteration must work with "
            "any scaler that has torch's methods"
        )
    return _(
        "your iteration calls the scaler as it should, yet the weights, the scale "
        "or the losses differ from torch's: compare what it computes with the "
        "lesson's (the fake points, the two losses under fp16 autocast) and what it "
        "returns (the losses before scaling)"
    )


def _gan_rows(gan_step: Callable, hidden: bool) -> list[Row]:
    rows, last_hint, said = [], "", ""
    for case in _GAN_HIDDEN if hidden else _GAN_CASES:
        expected = _run_gan(practice.gan_step, case, student=False)
        trace: list[list[str]] = []
        got = _run_gan(gan_step, case, student=True, trace=trace)
        ok = _same_gan(got, expected)
        shown = _describe_gan(got)
        if not ok and shown == _describe_gan(expected):
            shown = _("params differ")
        hint = "" if ok else _gan_hint(got, trace)
        if not ok and trace and gan_fault_hint(trace, not isinstance(got, Raised)):
            last_hint = hint
        elif not ok and case.ours and last_hint:  # LossScaler's calls go unrecorded:
            hint = last_hint  # the fault the recorded cases found is the likely one
        # the same hint in the next case: said once, the table stays short
        shown_hint = _("the same as above") if hint and hint == said else hint
        said = hint or said
        rows.append(Row(_(case.name), _describe_gan(expected), shown, ok, shown_hint))
    return rows


def check_gan_step(gan_step: Callable[..., Any], hidden: bool = False) -> None:
    """Check ``gan_step(generator, discriminator, opt_g, opt_d, scaler, real, noise)
    -> (d_loss, g_loss)``: one GAN iteration under fp16 autocast with one scaler.

    Example:
        >>> check_gan_step(gan_step)
    """
    _grade("check_gan_step", gan_step, hidden, _gan_rows)


# ---- check_first_overflow ----------------------------------------------------------


class _TwoBranches(nn.Module):
    """``a(x) + b(x)``: two finite fp16 halves whose sum can overflow."""

    def __init__(self, dim: int, weight: float) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(dim, dim), nn.Linear(dim, dim)
        with torch.no_grad():
            for layer in (self.a, self.b):
                layer.weight.fill_(weight)
                layer.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x)


class _Stack(nn.Module):
    def __init__(self, *blocks: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _mlp(big_layer: int) -> nn.Module:
    layers: list[nn.Module] = []
    for i in range(3):
        layer = nn.Linear(4, 4)
        with torch.no_grad():
            layer.weight.fill_(2e4 if i == big_layer else 0.25)  # 1.5 * 4 * 2e4
            layer.bias.fill_(0.5)
        layers += [layer, nn.ReLU()]
    return nn.Sequential(*layers)


class _SoftmaxByHand(nn.Module):
    """exp(x) / sum(exp(x)) without subtracting the max: in fp16, exp(12) is inf, and
    inf / inf is nan, so the output holds nan and no inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = x.exp()
        return e / e.sum(dim=-1, keepdim=True)


def _nan_not_inf() -> nn.Module:
    first = nn.Linear(4, 4)
    with torch.no_grad():
        first.weight.fill_(3.0)  # 12 for an input of ones
        first.bias.zero_()
    return nn.Sequential(first, _SoftmaxByHand(), nn.Linear(4, 2))


def _fp32_then_fp16() -> nn.Module:
    # an fp32 layer (autocast off) reaches 1e5, which fp32 holds; the fp16 layer
    # after it overflows
    first = nn.Linear(4, 4)
    with torch.no_grad():
        first.weight.fill_(2.5e4)
        first.bias.zero_()
    return nn.Sequential(RunInFp32(first), nn.Linear(4, 4))


_OVERFLOW_CASES: tuple[tuple[str, Callable[[], nn.Module], Callable[[], Any]], ...] = (
    (N_("MLP: one Linear too large"), lambda: _mlp(1), lambda: torch.ones(2, 4)),
    (N_("T5-like stack"), nan_hunt.t5_like_model, nan_hunt.t5_like_inputs),
    (N_("a model that stays in range"), lambda: _mlp(-1), lambda: torch.ones(2, 4)),
    # two finite halves (51200 each) whose sum, the model's own output, overflows
    (
        N_("the model's own sum overflows"),
        lambda: _TwoBranches(4, 800.0),
        lambda: torch.ones(2, 4) * 16,
    ),
    (N_("a softmax by hand: nan, no inf"), _nan_not_inf, lambda: torch.ones(2, 4)),
)
_OVERFLOW_HIDDEN: tuple[tuple[str, Callable[[], nn.Module], Callable[[], Any]], ...] = (
    (N_("a block's own sum overflows"),
     lambda: _Stack(_TwoBranches(4, 1.0), _TwoBranches(4, 800.0)),
     lambda: torch.ones(2, 4) * 2),
    (N_("an fp32 layer, then fp16"), _fp32_then_fp16, lambda: torch.ones(2, 4)),
    (N_("T5-like, outlier 3000"), lambda: nan_hunt.t5_like_model(outlier=3000.0),
     nan_hunt.t5_like_inputs),
)  # fmt: skip


def _build(make: Callable[[], Any]) -> Any:
    with _fixed_state(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make()


def _overflow_answers(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """The right answer and the answers of the usual shortcuts, for the hints."""
    with _fixed_state(), torch.no_grad(), torch.amp.autocast("cpu", torch.float16):
        with nan_hunt.OverflowDetector(model, dtype=torch.float16) as detector:
            model(x)
    findings = detector.findings
    leaves = [f for f in findings
              if not list(model.get_submodule(f.name).children())]  # fmt: skip
    with _fixed_state():
        fp32 = nan_hunt.find_first_overflow(model, x, dtype=None)
        every_dtype = nan_hunt.OverflowDetector(model)
        with torch.no_grad(), torch.amp.autocast("cpu", torch.float16), every_dtype:
            model(x)
    return {
        "right": findings[0].name if findings else None,
        "nan only": bool(findings) and _holds_no_inf(model, x, findings[0].name),
        "last": findings[-1].name if findings else None,
        "leaf": leaves[0].name if leaves else None,
        "fp32": fp32.name if fp32 else None,
        "kind": findings[0].kind if findings else None,
        "any dtype": every_dtype.first.name if every_dtype.first else None,
    }


def _holds_no_inf(model: nn.Module, x: torch.Tensor, name: str) -> bool:
    """Whether the fp16-autocast output of the module `name` holds nan but no inf."""
    seen: list[bool] = []

    def note(module: nn.Module, inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor) and not seen:
            seen.append(not bool(output.isinf().any()))

    handle = model.get_submodule(name).register_forward_hook(note)
    try:
        with _fixed_state(), torch.no_grad(), torch.amp.autocast("cpu", torch.float16):
            model(x)
    finally:
        handle.remove()
    return bool(seen and seen[0])


_OVERFLOW_HINTS = {
    "last": N_(
        "that is the LAST module holding an inf: once one output overflows, every "
        "later one is inf too; report the first, in the order the hooks fire"),
    "leaf": N_(
        "only leaf modules were watched: here a module's own code (an addition in "
        "its forward) overflowed while its children were fine; hook every module of "
        "model.named_modules(), containers included"),
    "fp32": N_(
        "that is where fp32 values pass 65504, not where fp16 overflows: run the "
        "forward under torch.amp.autocast('cpu', dtype=torch.float16), where only "
        "the outputs autocast makes fp16 can overflow"),
    "kind": N_(
        "return the module's NAME from model.named_modules() (e.g. 'blocks.3.wo'), "
        "not its class name"),
    "any dtype": N_(
        "an fp32 output above 65504 is fine: fp32 holds it; only fp16 outputs "
        "(output.dtype == torch.float16) overflow fp16"),
}  # fmt: skip


def _nan_hunt_code() -> dict[types.CodeType, str]:
    """The code objects of ``nan_hunt``'s functions and of the methods of its classes
    (nested functions included), each with the name a student would have called:
    what ``first_overflow`` may not run. The nn.Module classes (the T5-like model the
    check itself passes in) are left out."""
    found: dict[types.CodeType, str] = {}

    def add(code: types.CodeType, label: str) -> None:
        found[code] = label
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                add(const, label)

    for name, obj in vars(nan_hunt).items():
        if getattr(obj, "__module__", None) != nan_hunt.__name__:
            continue
        if inspect.isfunction(obj):
            add(obj.__code__, f"nan_hunt.{name}")
        elif inspect.isclass(obj) and not issubclass(obj, nn.Module):
            for attr in vars(obj).values():
                fn = attr.fget if isinstance(attr, property) else attr
                fn = getattr(fn, "__func__", fn)  # staticmethod, classmethod
                if inspect.isfunction(fn):
                    add(fn.__code__, f"nan_hunt.{name}")
    return found


_NAN_HUNT_CODE = _nan_hunt_code()


def _call_without_nan_hunt(fn: Callable, *args: Any) -> tuple[Any, str | None]:
    """``_call(fn, *args)``, and the first ``nan_hunt`` function it ran (None if none),
    however it was reached: ``nan_hunt.x``, ``from amp_lessons.core.nan_hunt import
    x``, or a helper of the student's. A profile function watches the calls for the
    length of the call only (a profiler already set is put back afterwards)."""
    used: list[str] = []

    def watch(frame: types.FrameType, event: str, _arg: Any) -> None:
        if event == "call" and not used:
            label = _NAN_HUNT_CODE.get(frame.f_code)
            if label is not None:
                used.append(label)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        got = _call(fn, *args)
    finally:
        sys.setprofile(previous)
    return got, (used[0] if used else None)


def _overflow_hint(got: Any, used: str | None, left: int, answers: dict) -> str:
    """Why ``got`` is not the first overflowing module (``answers["right"]``):
    ``used``, the ``nan_hunt`` function it ran; ``left``, the hooks it left on."""
    expected = answers["right"]
    if used is not None:
        return _(
            "your function called amp_lessons.core.{used}: the course's "
            "detector is this exercise's answer, so it may not be used. "
            "Write the hook yourself: model.named_modules() gives "
            "(name, module); module.register_forward_hook(fn) calls "
            "fn(module, inputs, output) as each module finishes; note the "
            "first name whose output holds inf/nan under fp16 autocast, and "
            "remove the hooks"
        ).format(used=used)
    if isinstance(got, Raised):
        return got.hint
    if not (got is None or type(got) is str):
        return _(
            "return the module's name (a str from model.named_modules()), "
            "or None when nothing overflows; got {value}"
        ).format(value=_show(got, 40))
    if got == expected:
        return _(
            "right module, but {left} forward hook(s) are still on the "
            "model: keep the handles register_forward_hook returns and "
            "call handle.remove() (in a finally: block)"
        ).format(left=left)
    if answers["nan only"] and got != expected:
        return _(
            "the first bad output here holds nan, not inf: this softmax written "
            "by hand overflows inside the module (exp(12) is inf in fp16) and "
            "divides inf by inf; look for both inf and nan"
        )
    if got is None:
        return _(
            "nothing found, yet an output overflows: hook every module and "
            "run the forward under fp16 autocast"
        )
    if expected is None:
        return _("no output overflows here (every output is finite): return None")
    wrong = [k for k in _OVERFLOW_HINTS if answers[k] == got]
    return _or([_(_OVERFLOW_HINTS[k]) for k in wrong]) or _(
        "not the first module whose output holds inf/nan under fp16 "
        "autocast; forward hooks fire as each module finishes, children "
        "before their parent"
    )


def _overflow_rows(first_overflow: Callable, hidden: bool) -> list[Row]:
    rows = []
    for name, make_model, make_x in _OVERFLOW_HIDDEN if hidden else _OVERFLOW_CASES:
        model, x = _build(make_model), _build(make_x)
        answers = _overflow_answers(_build(make_model), x)
        expected = answers["right"]
        got, used = _call_without_nan_hunt(first_overflow, model, x.clone())
        left = sum(len(m._forward_hooks) for m in model.modules())
        # compared only as str or None: an array's == (or a raising one) is no answer
        named = got is None or type(got) is str
        ok = named and got == expected and not left and used is None
        hint = "" if ok else _overflow_hint(got, used, left, answers)
        shown = (
            _show(got) if used is None else _("called {name}").format(name="nan_hunt")
        )
        rows.append(Row(_(name), repr(expected), shown, ok, hint))
    return rows


def check_first_overflow(first_overflow: Callable[..., Any], hidden: bool = False):
    """Check ``first_overflow(model, x) -> str | None``: the name (as in
    ``model.named_modules()``) of the first module whose output holds inf/nan in an
    fp16-autocast forward of ``model(x)``, or None; found with the student's own
    forward hooks (a function that calls ``amp_lessons.core.nan_hunt`` fails).

    Example:
        >>> check_first_overflow(first_overflow)
    """
    _grade("check_first_overflow", first_overflow, hidden, _overflow_rows)

"""Graded exercise checks: run a student's function on cases, print a table with hints.

Every notebook exercise has a solution cell where the student writes a function, and a
locked test cell that calls one `check_*` here with that function. The check calls it
on a set of cases whose expected answers come from PyTorch itself (casts,
`torch.nextafter`, `torch.amp.GradScaler`, ops run under autocast), prints one row per
case (case, expected, got, ok/FAIL) with a hint under each failing row aimed at the
likely mistake, and raises `AssertionError` when any case fails, so nbgrader scores the
cell. `hidden=True` runs a second, different set of cases: the ones between nbgrader's
`### BEGIN HIDDEN TESTS` markers. The unsolved stub (`raise NotImplementedError()`) is
reported as "not attempted" and fails too. Output goes to stdout only: nbgrader scores
a test cell that writes to stderr zero, so warnings are silenced inside each check.

The engine (rows, calling the student's function, grading) is `_engine`, with the
table in `_table` and where an exception came from in `_origin`;
each lesson's graders are one module, named after the lesson's own module: `formats`
(01), `underflow` (02), `scaler` (03), `autocast` (04), `step_order` and `train_step`
(05), `memory` (06), `clinic` (07), `quiz` (08), `practice` (09), `distributed` (10),
`fp8` (11). `_pristine` tells whether the grading code a kernel runs is still the
package's own.

A graded test cell takes its check from the package itself, never from a name in the
notebook (a solution cell could rebind that), and first asks whether the checks are
pristine (`verify_pristine`); ``python -m amp_lessons.grading fix-tests`` writes
this form and the grading lint refuses any other::

    import amp_lessons.teaching.checks as _checks
    _checks.verify_pristine()
    _checks.check_decode_fp16(decode_fp16)

Example:
    >>> def decode_fp16(bits):
    ...     raise NotImplementedError()
    >>> check_decode_fp16(decode_fp16)
    not attempted: decode_fp16() still raises NotImplementedError ...
    Traceback (most recent call last):
    AssertionError: not attempted: decode_fp16() still raises NotImplementedError ...

Not covered here: free-text answers; every exercise is a function with checkable output.
"""

# for the grading tooling (the guard, the autograder): the engine every check grades
# through, the audit events it raises, and the seal of these sources
from amp_lessons.teaching.checks._engine import grade
from amp_lessons.teaching.checks._pristine import (
    CHECK_DONE,
    CHECK_START,
    seal,
    verify_pristine,
)
from amp_lessons.teaching.checks.autocast import (
    AUTOCAST_DEVICES,
    AUTOCAST_OPS,
    check_autocast_dtypes,
)
from amp_lessons.teaching.checks.clinic import check_clinic_diagnosis
from amp_lessons.teaching.checks.distributed import check_rank_bytes
from amp_lessons.teaching.checks.entry import *  # noqa: F403 (00_amp_in_10_minutes)
from amp_lessons.teaching.checks.formats import (
    check_decode_fp16,
    check_fp16_spacing,
    check_round_to_fp16,
)
from amp_lessons.teaching.checks.fp8 import check_fp8_cast
from amp_lessons.teaching.checks.memory import check_memory_budget
from amp_lessons.teaching.checks.practice import check_first_overflow, check_gan_step
from amp_lessons.teaching.checks.quiz import check_quick_check
from amp_lessons.teaching.checks.scaler import check_unscale, check_update_rule
from amp_lessons.teaching.checks.step_order import AMP_STEPS, check_amp_step_order
from amp_lessons.teaching.checks.train_step import check_amp_train_step
from amp_lessons.teaching.checks.underflow import (
    check_choose_loss_scale,
    check_underflow_fraction,
)

__all__ = [
    "AMP_STEPS",
    "AUTOCAST_DEVICES",
    "AUTOCAST_OPS",
    "CHECK_DONE",
    "CHECK_START",
    "check_amp_step_order",
    "check_amp_train_step",
    "check_autocast_dtypes",
    "check_choose_loss_scale",
    "check_clinic_diagnosis",
    "check_decode_fp16",
    "check_first_overflow",
    "check_fp16_spacing",
    "check_fp8_cast",
    "check_gan_step",
    "check_memory_budget",
    "check_quick_check",
    "check_rank_bytes",
    "check_round_to_fp16",
    "check_underflow_fraction",
    "check_unscale",
    "check_update_rule",
    "grade",
    "seal",
    "verify_pristine",
]
__all__ += entry.__all__  # noqa: F405

"""Lesson 10's grader (amp_lessons.teaching.checks.distributed): reference, known-wrong
answers with their hints, the stub, and any odd return value or exception as a failed
case."""

import math

import pytest
from grader_harness import grader_tests

from amp_lessons.teaching.checks import check_rank_bytes

# --- reference solution (copy into the solution cell) ----------------------------


def rank_bytes(shape, mode, world_size, rank):
    rows, rest = shape[0], math.prod(shape[1:])
    if mode == "ddp":
        return 16 * rows * rest  # weight, gradient, exp_avg, exp_avg_sq: 4 bytes each
    chunk = math.ceil(rows / world_size)  # torch.chunk's rows per rank
    mine = max(0, min(chunk, rows - rank * chunk))
    return 8 * chunk * rest + 8 * mine * rest  # padded param + grad, real moments


# --- known-wrong answers, each with a fragment of the hint it must get ------------


def divides_numel(shape, mode, world_size, rank):
    numel = math.prod(shape)
    return 16 * numel if mode == "ddp" else 16 * numel / world_size


def ignores_padding(shape, mode, world_size, rank):
    rows, rest = shape[0], math.prod(shape[1:])
    if mode == "ddp":
        return 16 * rows * rest
    chunk = math.ceil(rows / world_size)
    return 16 * max(0, min(chunk, rows - rank * chunk)) * rest


def pads_the_moments(shape, mode, world_size, rank):
    rows, rest = shape[0], math.prod(shape[1:])
    padded_rows = rows if mode == "ddp" else math.ceil(rows / world_size)
    return 16 * padded_rows * rest


def ddp_sharded_too(shape, mode, world_size, rank):
    return rank_bytes(shape, "fsdp2", world_size, rank)


def forgets_the_moments(shape, mode, world_size, rank):
    rows, rest = shape[0], math.prod(shape[1:])
    return 8 * (rows if mode == "ddp" else math.ceil(rows / world_size)) * rest


def counts_the_step(shape, mode, world_size, rank):
    return rank_bytes(shape, mode, world_size, rank) + 4


def counts_bits(shape, mode, world_size, rank):
    return 8 * rank_bytes(shape, mode, world_size, rank)


def last_rank_gets_the_rest(shape, mode, world_size, rank):
    # every rank before the last a whole chunk: wrong when torch.chunk makes fewer
    # chunks than ranks (5 rows on 4 ranks: 2, 2, 1 and none)
    rows, rest = shape[0], math.prod(shape[1:])
    if mode == "ddp":
        return 16 * rows * rest
    chunk = math.ceil(rows / world_size)
    mine = chunk if rank < world_size - 1 else rows - chunk * (world_size - 1)
    return 8 * chunk * rest + 8 * mine * rest


def rounds_rows_down(shape, mode, world_size, rank):
    rows, rest = shape[0], math.prod(shape[1:])
    if mode == "ddp":
        return 16 * rows * rest
    chunk = rows // world_size
    return 8 * chunk * rest + 8 * max(0, min(chunk, rows - rank * chunk)) * rest


CASES = {
    "rank_bytes": (
        check_rank_bytes,
        rank_bytes,
        [
            (divides_numel, False, "shards whole rows"),
            (ignores_padding, False, "padded to ceil(rows / N)"),
            (pads_the_moments, True, "without the padding"),
            (ddp_sharded_too, False, "DDP keeps a whole copy"),
            (forgets_the_moments, False, "two fp32 moments"),
            (counts_the_step, False, "4-byte `step` counter"),
            (counts_bits, True, "bytes, not bits"),
            (last_rank_gets_the_rest, False, "rank 2 holds 1 of the 5 rows"),
            (last_rank_gets_the_rest, True, "rank 3 holds 0 of the 5 rows"),
            (rounds_rows_down, False, "rounds the rows per rank up, not down"),
        ],
    ),
}
(
    test_reference_passes,
    test_wrong_answer_rejected_with_hint,
    test_stub_is_not_attempted,
) = grader_tests(CASES)


def test_a_float_of_the_right_value_is_told_to_be_an_int(capsys):
    """The exercise says "Return an int": a float of the right value fails, and the
    hint says how a float crept in."""
    with pytest.raises(AssertionError, match="8 of 8 cases failed"):
        check_rank_bytes(lambda *args: float(rank_bytes(*args)))
    out = " ".join(capsys.readouterr().out.split())
    assert "not a float" in out and "// keep ints" in out


@pytest.mark.parametrize(
    "answer",
    [
        None,
        "160",
        True,
        float("nan"),
        float("inf"),
        -1,
        1e300,
        [160],
        {"bytes": 160},
        object(),
    ],
    ids=lambda a: "object()" if type(a) is object else repr(a),
)  # the same id in
# every pytest-xdist worker: a default object's repr holds its address
def test_any_odd_return_value_is_a_failed_case_never_a_crash(answer, capsys):
    with pytest.raises(AssertionError, match="cases? failed"):
        check_rank_bytes(lambda *args: answer)
    out, err = capsys.readouterr()
    assert "FAIL" in out and err == ""


@pytest.mark.parametrize(
    "exc", [ZeroDivisionError, KeyError, TypeError, RecursionError, ArithmeticError]
)
def test_any_exception_is_a_failed_case_with_its_name(exc, capsys):
    def raises(*args):
        raise exc("boom")

    with pytest.raises(AssertionError, match="8 of 8 cases failed"):
        check_rank_bytes(raises)
    out, err = capsys.readouterr()
    assert f"raised {exc.__name__}" in " ".join(out.split()) and err == ""


def test_a_wrong_answer_gets_its_hint_in_spanish(capsys, spanish):
    with pytest.raises(AssertionError, match="casos fallaron"):
        check_rank_bytes(divides_numel)
    out = " ".join(capsys.readouterr().out.split())
    assert "pista: FSDP2 reparte filas enteras" in out
    assert "5 filas en 2 ranks son fragmentos de ceil(5/2) = 3 fila(s)" in out
    assert "DDP guarda una copia completa" not in out  # the ddp rows were right


def test_a_value_two_mistakes_give_is_read_from_the_whole_answer(capsys):
    # on 3x64 over 2 ranks, rank 1, forgetting the padding gives 1_024, and so does
    # forgetting the moments; the answer's other values say which it was
    with pytest.raises(AssertionError):
        check_rank_bytes(ignores_padding)
    out = " ".join(capsys.readouterr().out.split())
    assert "padded to ceil(rows / N)" in out
    assert "two fp32 moments" not in out
    with pytest.raises(AssertionError):
        check_rank_bytes(forgets_the_moments)
    out = " ".join(capsys.readouterr().out.split())
    assert "two fp32 moments" in out and "padded to ceil(rows / N)" not in out

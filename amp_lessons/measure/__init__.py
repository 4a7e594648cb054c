"""Measurement: the speed and memory benchmark (fp32 vs fp16 vs bf16 in one run), its
recorded results, the fp8 and scaler benches, the fp8 twin measured against torchao
bit for bit (``fp8_vs_torchao``), and the GPU check's report (the check itself, which
runs the tests and the lessons, is ``tooling.gpu_check``).

It may import ``core`` only; the lessons (``teaching``) read what it records.
"""

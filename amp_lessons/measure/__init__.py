"""Measurement: the speed and memory benchmark (fp32 vs fp16 vs bf16 in one run), its
recorded results, the fp8 and scaler benches, and the GPU check with its report.

It may import ``core`` only; the lessons (``teaching``) read what it records.
"""

"""The AMP library a learner reuses in their own code: number formats, the loss scaler,
precision and autocast, the training loop and its checkpoints, memory, distributed and
fp8.

It imports only torch, the standard library and ``amp_lessons.i18n``; never the lessons'
material (``teaching``), measurement (``measure``) or course tooling (``tooling``).
"""

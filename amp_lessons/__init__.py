"""AMP from the bits up: the package behind the mixed-precision notebooks.

One module per concept, in teaching order: device, formats, underflow, scaler (and
scaler_vs_torch, which checks it against torch), autocast, train, memory, bench,
clinic, quiz, widgets, and the checks package (the exercise graders, one module per
lesson); and for running the course: lab, grading, bootstrap. Import the module you
need, e.g. ``from amp_lessons.formats import decompose``; nothing heavy is imported
here.
"""

__version__ = "0.1.0"

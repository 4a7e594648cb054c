"""The lessons' material: what fp16 does to real gradients (``underflow``), the live
autocast op table (``autocast_table``), demos, the clinic, the reproductions, plots,
widgets and the graded exercises' checks, each built on the library to show one thing
in a notebook.

It may import ``core`` and ``measure`` (the widgets show recorded benchmark results);
never ``tooling``, and nothing in ``core`` or ``measure`` imports it.
"""

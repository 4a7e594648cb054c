"""The course as a static website (``make site``): every lesson executed, its solutions
and hidden tests stripped, rendered offline by Sphinx + myst-nb into ``build/site/``.

Modules, in the order a build uses them: ``execute`` (run the lessons, record what ran
them), ``sanitize`` (what a reader may see of each notebook), ``build`` (the Sphinx
project and its offline assets), ``verify`` (no solution line, nothing remote).
"""

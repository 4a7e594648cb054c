"""Course tooling: setting up the environment (``bootstrap``), starting JupyterLab
safely (``lab``), teaching with nbgrader (``grading``), the site, Colab cells and
translations.

It may import every other layer (``teaching``, ``measure``, ``core``); none imports it.
"""

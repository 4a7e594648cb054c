"""Course tooling, apart from the lessons: setting up the environment (``bootstrap``),
starting JupyterLab safely (``lab``) and teaching with nbgrader (``grading``)."""

# The course's JupyterLab terminals (amp_lessons/tooling/lab.py starts bash with this
# file): the user's own bash set-up first, then the course's Python first on PATH, so
# that `python -m amp_lessons ...`, as the lessons write it, runs the course's .venv
# (a ~/.bashrc that puts pyenv or conda first would otherwise win).
if [ -f ~/.bashrc ]; then
  . ~/.bashrc
fi
if [ -n "$AMP_LESSONS_BIN" ]; then
  export PATH="$AMP_LESSONS_BIN:$PATH"
fi

"""``python -m amp_lessons.tooling.grading.guard -f CONNECTION_FILE``: the guarded
kernel, as the sandbox's kernelspec starts it (``runner``); see ``main``."""

from amp_lessons.tooling.grading.guard import main

main()

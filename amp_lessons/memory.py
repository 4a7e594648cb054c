"""``amp_lessons.memory`` is the name COURSE.md's public API promises; the code lives in
``amp_lessons.core.memory``. This alias is that very module, so patches and ``is``
agree."""

import sys

from amp_lessons.core import memory

sys.modules[__name__] = memory

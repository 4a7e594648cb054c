"""``amp_lessons.fp8`` is the name COURSE.md's public API promises; the code lives in
``amp_lessons.core.fp8``. This alias is that very module, so patches and ``is``
agree."""

import sys

from amp_lessons.core import fp8

sys.modules[__name__] = fp8

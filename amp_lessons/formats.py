"""``amp_lessons.formats`` is the name COURSE.md's public API promises; the code lives
in ``amp_lessons.core.formats``. This alias is that very module, so patches and ``is``
agree."""

import sys

from amp_lessons.core import formats

sys.modules[__name__] = formats

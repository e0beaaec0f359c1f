"""The stack level of the user's line, for warnings raised deep inside an op."""

from __future__ import annotations

import inspect
import os

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def find_stack_level() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` called by this function's caller that
    points at the first frame outside jaxpool: the user's line, however many of jaxpool's
    frames (the public function, the driver, the plan) lie between."""
    frame = inspect.currentframe()
    level = 0
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level

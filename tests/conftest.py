"""pytest configuration shared by the test suite: tests/ on sys.path (for `programs`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# Debug checking: every pipeline run by a test verifies the module after each pass.
os.environ.setdefault("HLOFUSE_VERIFY", "1")

# The cpu backend's tests compile a few hundred generated C files on a cold cache (CI): -O1 keeps
# that fast. Benchmarks and users get the default -O3.
os.environ.setdefault("HLOFUSE_CC_OPT", "-O1")

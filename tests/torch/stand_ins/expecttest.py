"""A stand-in for PyPI's expecttest, for where it cannot be installed.

PyTorch's test helpers (torch.testing._internal.common_utils) import expecttest for two names:
its TestCase, the base of every PyTorch test, and ACCEPT, the flag that rewrites expected
strings in the source. The DistributedTest suite compares no inline expected strings, so a
TestCase whose inline checks are plain comparisons serves it. distributed_suite.py puts this
directory on sys.path only when the real module is missing, and says so.
"""
import unittest

ACCEPT = False  # this stand-in never rewrites a test's source


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (expecttest's name)
        self.assertMultiLineEqual(expect, actual)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):  # noqa: N802
        with self.assertRaises(exc_type) as raised:
            callable(*args, **kwargs)
        self.assertExpectedInline(str(raised.exception), expect)

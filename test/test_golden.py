# Owner(s): ["module: inductor"]
"""Golden files: what the masks hide, and goldens per torch release (release_goldens)."""
import os
import tempfile
from unittest import mock

import expecttest
from torch._inductor.test_case import run_tests, TestCase
from torch.testing._internal import common_utils

from torch_overlay.testing import release_goldens
from torch_overlay.testing.golden import normalize

KERNEL = """# AOT ID: ['7_inference']
# kernel path: /tmp/torchinductor_ci/ab/cabcdef.py
    inductor_meta={'kernel_name': 'triton_poi_fused_add_gelu_0', 'backend_hash': '%s', 'num_load': 2},
    tmp2 = tmp0 * tmp1
""" % ("A1" * 32)
NEWEST = "2.15"


class TestGolden(TestCase):
    def test_normalize_keeps_kernel_and_masks_volatile(self):
        out = normalize(KERNEL)
        self.assertIn("# AOT ID: ['<N>_inference']", out)
        self.assertIn("# kernel path: <cache>", out)
        self.assertIn("'backend_hash': '<backend_hash>'", out)
        self.assertIn("'kernel_name': 'triton_poi_fused_add_gelu_0'", out)
        self.assertIn("tmp2 = tmp0 * tmp1", out)
        # another run of the same code (other counter, path, hash) is the same golden
        self.assertEqual(out, normalize(KERNEL.replace("7_inference", "0_inference")
                                        .replace("A1" * 32, "B2" * 32)))


class TestGoldensPerRelease(TestCase):
    """expect/<name> is the newest release's code; expect/torch-X.Y/<name> an older
    release's, only where it differs."""

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.shared = os.path.join(self.tmp.name, "expect", "T.test.expect")
        self.own = os.path.join(self.tmp.name, "expect", "torch-2.11", "T.test.expect")
        os.makedirs(os.path.dirname(self.shared))

    def tearDown(self):
        self.tmp.cleanup()
        super().tearDown()

    def check(self, text, release, accept=False):
        paths = (self.shared, None if release == NEWEST else self.own)
        with mock.patch.object(release_goldens, "expect_paths", lambda t, s, n: paths), \
                mock.patch.object(release_goldens, "release", lambda: release), \
                mock.patch.object(expecttest, "ACCEPT", accept), \
                mock.patch.object(common_utils.TestCase, "assertExpected", self.shared_assert), \
                release_goldens.per_release(NEWEST):
            self.assertExpected(text)

    def shared_assert(self, test, s, subname=None):
        # what TestCase.assertExpected does with the shared file
        if expecttest.ACCEPT:
            with open(self.shared, "w") as f:
                f.write(s)
        else:
            with open(self.shared) as f:
                test.assertMultiLineEqual(f.read(), s)

    def test_newest_release_reads_and_accepts_the_shared_file(self):
        self.check("new code\n", NEWEST, accept=True)
        self.check("new code\n", NEWEST)
        with self.assertRaises(AssertionError):
            self.check("other code\n", NEWEST)
        self.assertFalse(os.path.exists(self.own))

    def test_older_release_has_its_own_file_only_where_its_code_differs(self):
        self.check("new code\n", NEWEST, accept=True)
        self.check("new code\n", "2.11", accept=True)  # the same code: one file
        self.assertFalse(os.path.exists(self.own))
        self.check("new code\n", "2.11")
        self.check("old code\n", "2.11", accept=True)  # other code: its own file
        with open(self.own) as f:
            self.assertEqual(f.read(), "old code\n")
        self.check("old code\n", "2.11")
        with self.assertRaises(AssertionError):
            self.check("new code\n", "2.11")
        self.check("new code\n", NEWEST)  # the shared file is untouched
        self.check("new code\n", "2.11", accept=True)  # back to the same: removed
        self.assertFalse(os.path.exists(self.own))


if __name__ == "__main__":
    run_tests()

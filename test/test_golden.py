# Owner(s): ["module: inductor"]
"""The golden-file mechanism: normalisation, readable diffs, EXPECTTEST_ACCEPT."""
import os
import tempfile
from unittest import mock

from torch._inductor.test_case import run_tests, TestCase

from torch_overlay.testing.golden import GoldenMixin, normalize

KERNEL = """# AOT ID: ['7_inference']
# kernel path: /tmp/torchinductor_ci/ab/cabcdef.py
    inductor_meta={'kernel_name': 'triton_poi_fused_add_gelu_0', 'backend_hash': '%s', 'num_load': 2},
    tmp2 = tmp0 * tmp1
""" % ("A1" * 32)


class TestGolden(GoldenMixin, TestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        path = os.path.join(self.tmp.name, "expect", "golden.expect")
        self.patch = mock.patch.object(GoldenMixin, "expect_file", lambda self, subname=None: path)
        self.patch.start()
        self.path = path

    def tearDown(self):
        self.patch.stop()
        self.tmp.cleanup()
        super().tearDown()

    def test_normalize_keeps_kernel_and_masks_volatile(self):
        out = normalize(KERNEL)
        self.assertIn("# AOT ID: ['<N>_inference']", out)
        self.assertIn("# kernel path: <cache>", out)
        self.assertIn("'backend_hash': '<backend_hash>'", out)
        self.assertIn("'kernel_name': 'triton_poi_fused_add_gelu_0'", out)
        self.assertIn("tmp2 = tmp0 * tmp1", out)

    def test_missing_golden_fails_with_instructions(self):
        with mock.patch.dict(os.environ, {"EXPECTTEST_ACCEPT": ""}), \
                mock.patch("expecttest.ACCEPT", None):
            with self.assertRaisesRegex(AssertionError, "EXPECTTEST_ACCEPT=1"):
                self.assertExpectedCode(KERNEL)

    def test_changed_kernel_fails_with_unified_diff_then_accepts(self):
        with mock.patch.dict(os.environ, {"EXPECTTEST_ACCEPT": "1"}):
            self.assertExpectedCode(KERNEL)  # creates the golden
        changed = KERNEL.replace("tmp0 * tmp1", "tmp0 + tmp1")
        with mock.patch.dict(os.environ, {"EXPECTTEST_ACCEPT": ""}), \
                mock.patch("expecttest.ACCEPT", None):
            with self.assertRaises(AssertionError) as ctx:
                self.assertExpectedCode(changed)
            message = str(ctx.exception)
            self.assertIn("--- " + self.path, message)
            self.assertIn("+++ generated", message)
            self.assertIn("-    tmp2 = tmp0 * tmp1", message)
            self.assertIn("+    tmp2 = tmp0 + tmp1", message)
            # a different run of the same code (other counter, path, hash) still matches
            self.assertExpectedCode(KERNEL.replace("7_inference", "0_inference")
                                    .replace("A1" * 32, "B2" * 32))
        with mock.patch.dict(os.environ, {"EXPECTTEST_ACCEPT": "1"}):
            self.assertExpectedCode(changed)
        with mock.patch.dict(os.environ, {"EXPECTTEST_ACCEPT": ""}), \
                mock.patch("expecttest.ACCEPT", None):
            self.assertExpectedCode(changed)


if __name__ == "__main__":
    run_tests()

# Owner(s): ["module: inductor"]
"""Inductor's FX graph and AOTAutograd caches never serve code of another overlay state."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import uuid

from torch._inductor.test_case import run_tests, TestCase

WORKER = pathlib.Path(__file__).with_name("cache_safety_worker.py")


class TestCacheSafety(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # one cache dir for the class: the overlays' parse memo is paid once; each test
        # keys its own FX and AOTAutograd entries by a tag
        cls.cache_dir = tempfile.mkdtemp()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.cache_dir, ignore_errors=True)
        super().tearDownClass()

    def run_worker(self, tag, state, *flags):
        # scalar C++ (TORCHINDUCTOR_VEC_ISA_OK=0): else each process builds and loads a
        # probe per vector ISA first, 30-45 s a process on 2.11
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=self.cache_dir,
                   TORCH_COMPILE_CACHE_KEY_TAG=tag, TORCHINDUCTOR_VEC_ISA_OK="0",
                   TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
        env.pop("TORCH_OVERLAY_DISABLE", None)
        # without the activation conftest gives the suite's child processes: the worker
        # enables (or not) only its toy overlay, else the real ones' flags are in the key
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and not os.path.basename(p).startswith("torch_overlay_children_"))
        out = subprocess.run([sys.executable, str(WORKER), state, *flags], env=env,
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        return json.loads(out.stdout.strip().splitlines()[-1])

    def test_on_off_on_each_gets_its_own_code(self):
        tag = uuid.uuid4().hex
        first = self.run_worker(tag, "on")
        self.assertTrue(first["cos"], first)
        self.assertEqual(first["fx_hits"], 0)
        off = self.run_worker(tag, "off")
        self.assertTrue(off["sin"], off)  # not the cached overlay code
        again = self.run_worker(tag, "on")
        self.assertTrue(again["cos"], again)
        # the cache still works within one state
        self.assertGreater(again["fx_hits"] + again["aot_hits"], 0, again)

    def test_control_without_cache_key_is_served_stale_code(self):
        # proves the test above can fail: a bare lowering patch is invisible to the key
        tag = uuid.uuid4().hex
        self.assertTrue(self.run_worker(tag, "on", "--unsafe")["cos"])
        stale = self.run_worker(tag, "off", "--unsafe")
        self.assertTrue(stale["cos"], stale)


if __name__ == "__main__":
    run_tests()

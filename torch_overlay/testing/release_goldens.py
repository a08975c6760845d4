"""Goldens per torch release, for ``TestCase.assertExpected`` (expect files).

The expect files beside a test (``expect/<Class>.<test>[-subname].expect``) are the code
the newest supported release generates: the release the exported series targets, whose
tests upstream carries as they are. Where an older release generates other code, its
file lies in ``expect/torch-<major>.<minor>/`` under the same name and is used there
instead; where the code is the same, there is one file. So ``ls expect/torch-2.11``
lists what changed between that release and the newest, and a ``diff`` shows how.

``EXPECTTEST_ACCEPT=1`` on the newest release rewrites the shared file; on an older one
it writes the release's own file only where its code differs (and removes it where it
no longer does).
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator
from unittest import mock

import expecttest
import torch
from torch.testing._internal.common_utils import TestCase


def release() -> str:
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def expect_paths(test: TestCase, subname: str | None, newest: str) -> tuple[str, str | None]:
    """(the shared expect file, this release's own file or None on the newest release),
    named as ``TestCase.assertExpected`` names them."""
    module_id = type(test).__module__
    munged = test.id().removeprefix(module_id + ".")
    name = munged + (f"-{subname}" if subname else "") + ".expect"
    folder = os.path.join(os.path.dirname(os.path.realpath(sys.modules[module_id].__file__)),
                          "expect")
    own = None if release() == newest else os.path.join(folder, f"torch-{release()}", name)
    return os.path.join(folder, name), own


@contextlib.contextmanager
def per_release(newest: str) -> Iterator[None]:
    """Within, assertExpected reads and accepts goldens per release (module docstring)."""
    shared_assert = TestCase.assertExpected

    def assertExpected(self: TestCase, s: str, subname: str | None = None) -> None:
        shared, own = expect_paths(self, subname, newest)
        if own is None:
            return shared_assert(self, s, subname)
        if expecttest.ACCEPT:
            same = os.path.exists(shared) and open(shared).read() == s
            if same:
                if os.path.exists(own):
                    os.remove(own)
                return None
            os.makedirs(os.path.dirname(own), exist_ok=True)
            with open(own, "w") as f:
                f.write(s)
            return None
        if os.path.exists(own):
            with open(own) as f:
                self.assertMultiLineEqual(f.read(), s)
            return None
        return shared_assert(self, s, subname)

    with mock.patch.object(TestCase, "assertExpected", assertExpected):
        yield

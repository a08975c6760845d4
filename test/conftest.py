"""pytest test/: the overlays enabled, every feature flag at its upstream default (off),
and the GPU-free harness (``torch_overlay.testing.gpu_free``) where no GPU is present.

Each test turns on the features it tests with their ``torch._inductor.config`` flags
(``config.patch``), as upstream tests do; under ``TORCH_OVERLAY_DISABLE=1`` a torch
patched by the series declares the same flags (tools/export_patches.py --check).
"""
import pytest

import torch_overlay

pytest_plugins = ["torch_overlay.testing.gpu_free"]

# before the test modules import the new upstream modules
torch_overlay.enable()


def _newest_release_names():
    """The exported tests use the pinned release's names; an older supported release's
    differ (torch 2.11: ``maybe_mark_dynamic_helper``). Its callers then look the new
    name up, so that a test's mock of it holds."""
    from torch._functorch._aot_autograd import runtime_wrappers as rw

    if not hasattr(rw, "mark_dynamo_propagated_dynamic_indices"):
        rw.mark_dynamo_propagated_dynamic_indices = rw.maybe_mark_dynamic_helper
        rw.maybe_mark_dynamic_helper = (
            lambda t, dims: rw.mark_dynamo_propagated_dynamic_indices(t, dims))


_newest_release_names()

if not torch_overlay.killed():
    # Python processes the tests start get the overlays too, as a patched torch has them
    import atexit
    import os
    import shutil
    import tempfile

    from torch_overlay._autoload import prepend_pythonpath, write_sitecustomize

    _children = tempfile.mkdtemp(prefix="torch_overlay_children_")
    atexit.register(shutil.rmtree, _children, ignore_errors=True)
    prepend_pythonpath(os.environ, write_sitecustomize(_children))


@pytest.fixture(autouse=True, scope="session")
def goldens_per_release():
    from torch_overlay.testing.release_goldens import per_release

    # the expect files beside the tests are the newest supported release's code
    with per_release(newest=torch_overlay.SUPPORTED_TORCH[-1]):
        yield


def _flags_off():
    from torch._inductor import config

    return config.patch({o.flag: False for o in torch_overlay.OVERLAYS})


@pytest.fixture(autouse=True)
def overlays_enabled_flags_off():
    if torch_overlay.killed():
        yield
        return
    torch_overlay.enable()  # again, if a test or tool in this process disabled them
    with _flags_off():
        try:
            yield
        finally:
            torch_overlay.enable()  # the flags must exist for the patch to put them back

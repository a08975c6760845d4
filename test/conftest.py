"""pytest test/: the overlays enabled for the whole session, as an installed hook would.

Tests switch each feature with its ``torch._inductor.config`` flag (``config.patch``),
which the overlays declare; under ``TORCH_OVERLAY_DISABLE=1`` a patched torch declares
them instead (tools/export_patches.py --check).
"""
import torch_overlay

torch_overlay.enable()

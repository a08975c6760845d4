"""Overlays of torch/_inductor/fx_passes."""

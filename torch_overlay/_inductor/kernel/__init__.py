"""Overlays of torch/_inductor/kernel: lowerings and their Triton templates."""

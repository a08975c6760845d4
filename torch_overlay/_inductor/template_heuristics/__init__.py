"""Config heuristics of the overlays' templates, registered as Inductor registers its own."""

"""Overlay modules, at the paths of the torch/_inductor modules they would patch upstream."""

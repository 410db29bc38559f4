"""Test harness tools of this repository (not shipped with the package)."""

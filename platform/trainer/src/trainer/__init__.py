"""The standard training driver (platform/trainer/README.md)."""

"""The model family and its arithmetic (parameters, FLOPs, MFU)."""

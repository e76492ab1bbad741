"""The reference task's data: batches as a pure function of (seed, group, index), the packaged corpus."""

"""Hostile input against every loader and parser: bounded time and memory, one line, exit 2."""

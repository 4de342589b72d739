"""Saved prompt states: what they are keyed by (file, build, machine), the prefix cache, and a state stretched to a longer context."""

"""Worked examples of the adapter interfaces (solaris.adapters)."""

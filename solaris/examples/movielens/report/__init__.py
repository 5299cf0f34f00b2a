"""Reproduction of the paper's tables on the MovieLens-100K request replay (`solaris report`)."""

"""The rating tasks: binary labels derived from an explicit 1–5 rating.

``like`` (rating >= 4) is the label of the request log and the VM's task; ``love``
(rating == 5) is the FM's second task.
"""

__all__ = ["LIKE_THRESHOLD", "LOVE_RATING"]

LIKE_THRESHOLD = 4  # label of the main task: rating >= 4
LOVE_RATING = 5  # second FM task: rating == 5

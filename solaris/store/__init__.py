"""Feature-store plumbing: the Feast store over feature_repo/, and which Redis to use."""

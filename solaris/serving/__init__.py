"""Serving: one Feast call per request, tier fallback, training sets that match serving."""

"""scheduler/policies."""

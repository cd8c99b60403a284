"""specs."""

"""The trace-driven simulator: a driver that replays a trace against the core."""

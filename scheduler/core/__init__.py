"""The pure scheduling core: events in, plans out; no clock, socket or file (see engine.Core)."""
from scheduler.core.engine import Core, SchedulingError

__all__ = ["Core", "SchedulingError"]

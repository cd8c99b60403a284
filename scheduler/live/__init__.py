"""The live driver: the scheduling core run against real node agents over the broker.

Open `service.py` first (the thin wiring); docs/architecture.md has the map."""

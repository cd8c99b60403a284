"""Limits on measured times, shared by the message schema and the core's profile estimator
(a module of constants only, so that neither has to import the other)."""

MAX_SECONDS = 1e6  # a stage, iteration or restart time (trace s): ~11.6 days is a broken clock

"""A vectorised cart-pole environment in numpy: the RL workloads' world, built into the project.

Why our own: no gym dependency and no download, and its whole state (including the random
generator) fits in a checkpoint, so an RL job resumes exactly. Classic cart-pole physics
(Barto, Sutton & Anderson 1983), Euler steps of 20 ms; an episode ends when the pole leans
past 12 degrees or the cart leaves +-2.4, and is cut at `max_steps`. Reward 1 per step.
"""
from __future__ import annotations

import json
import math

import numpy as np

GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
THETA_LIMIT, X_LIMIT = 12 * 2 * math.pi / 360, 2.4
OBS_DIM, ACTIONS = 4, 2


class CartPole:
    """`n` independent cart-poles that reset themselves when their episode ends."""

    def __init__(self, n: int, seed: int, max_steps: int = 200):
        if n <= 0:
            raise ValueError(f"need at least one environment, got {n}")
        self.n, self.max_steps = n, max_steps
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, size=(n, OBS_DIM))
        self.steps = np.zeros(n, dtype=np.int64)
        self.returns = np.zeros(n)
        self.finished: list[float] = []  # returns of completed episodes, for reporting

    @property
    def obs(self) -> np.ndarray:
        return self.state.astype(np.float32)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Apply one action per env; returns (next_obs, reward, terminated, truncated).

        `next_obs` is the state the action led to, before any reset, as a learner needs it;
        environments whose episode ended are then reset, and `self.obs` shows the new start.
        """
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(np.asarray(actions) == 1, FORCE, -FORCE)
        cos, sin = np.cos(theta), np.sin(theta)
        total_mass, pole_ml = CART_MASS + POLE_MASS, POLE_MASS * HALF_LENGTH
        temp = (force + pole_ml * theta_dot**2 * sin) / total_mass
        theta_acc = (GRAVITY * sin - cos * temp) / (
            HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos**2 / total_mass))
        x_acc = temp - pole_ml * theta_acc * cos / total_mass
        self.state = np.stack([x + TAU * x_dot, x_dot + TAU * x_acc,
                               theta + TAU * theta_dot, theta_dot + TAU * theta_acc], axis=1)
        self.steps += 1
        self.returns += 1.0
        next_obs = self.obs
        terminated = (np.abs(self.state[:, 0]) > X_LIMIT) | (np.abs(self.state[:, 2]) > THETA_LIMIT)
        truncated = ~terminated & (self.steps >= self.max_steps)
        ended = terminated | truncated
        if ended.any():
            self.finished.extend(self.returns[ended].tolist())
            del self.finished[:-100]
            self.state[ended] = self.rng.uniform(-0.05, 0.05, size=(int(ended.sum()), OBS_DIM))
            self.steps[ended] = 0
            self.returns[ended] = 0.0
        return next_obs, np.ones(self.n, dtype=np.float32), terminated, truncated

    def state_dict(self) -> dict:
        """Everything needed to continue exactly, as plain lists and a JSON string."""
        return {"state": self.state.tolist(), "steps": self.steps.tolist(),
                "returns": self.returns.tolist(), "finished": list(self.finished),
                "rng": json.dumps(self.rng.bit_generator.state)}

    def load_state_dict(self, d: dict) -> None:
        self.state = np.asarray(d["state"], dtype=np.float64).reshape(self.n, OBS_DIM)
        self.steps = np.asarray(d["steps"], dtype=np.int64)
        self.returns = np.asarray(d["returns"], dtype=np.float64)
        self.finished = list(d["finished"])
        self.rng.bit_generator.state = json.loads(d["rng"])

"""Reinforcement-learning workloads on the built-in cart-pole: DQN and A2C.

RL has no dataset to read, so its "data" stages are the environment: `load` steps the
environments with the current policy (the io/cpu side of an RL iteration), `prepare` turns
the experience into tensors (for DQN: samples a minibatch from the replay buffer), and
`compute` does the loss and backward pass. Every random choice comes from the workload's own
numpy generator or the environment's, both saved in `extra_state`, so a resumed job continues
exactly where it stopped (replay buffer and target network included).
"""
from __future__ import annotations

import inspect
import json
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from workloads.base import Common, Workload, hash_ints, reject_unknown, torch_device
from workloads.cartpole import ACTIONS, OBS_DIM, CartPole


def mlp(inputs: int, hidden: int, outputs: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, outputs))


class _RLBase(Workload):
    def __init__(self, model: torch.nn.Module, lr: float, common: Common, n_envs: int):
        device = torch_device(common.device)
        super().__init__(model.to(device), torch.optim.Adam(model.parameters(), lr=lr), device,
                         common)
        self.env = CartPole(n_envs, seed=hash_ints(common.seed, common.rank, 1))
        self.rng = np.random.default_rng(hash_ints(common.seed, common.rank, 2))

    def mean_return(self) -> float:
        """Mean return of the last completed episodes (NaN before the first ends)."""
        return float(np.mean(self.env.finished)) if self.env.finished else float("nan")

    def _base_state(self) -> dict[str, Any]:
        return {"env": self.env.state_dict(), "rng": json.dumps(self.rng.bit_generator.state)}

    def _load_base(self, d: dict[str, Any]) -> None:
        self.env.load_state_dict(d["env"])
        self.rng.bit_generator.state = json.loads(d["rng"])


class DQN(_RLBase):
    """Deep Q-learning with a replay buffer, a target network and epsilon-greedy exploration."""

    name = "dqn"

    def __init__(self, common: Common, hidden: int = 64, n_envs: int = 4, buffer: int = 10_000,
                 gamma: float = 0.99, target_every: int = 50, eps_start: float = 1.0,
                 eps_end: float = 0.05, eps_iterations: int = 500, warmup: int = 64):
        torch.manual_seed(common.seed)
        lr = common.lr if common.lr is not None else 1e-3
        super().__init__(mlp(OBS_DIM, hidden, ACTIONS), lr, common, n_envs)
        self.target = mlp(OBS_DIM, hidden, ACTIONS).to(self.device)
        self.target.load_state_dict(self.model.state_dict())
        self.batch_size = common.batch_size or 64
        self.gamma, self.target_every = gamma, target_every
        self.eps = (eps_start, eps_end, eps_iterations)
        self.warmup = max(warmup, self.batch_size)
        self.capacity = buffer
        self.buf = {"obs": np.zeros((buffer, OBS_DIM), np.float32),
                    "next": np.zeros((buffer, OBS_DIM), np.float32),
                    "action": np.zeros(buffer, np.int64), "reward": np.zeros(buffer, np.float32),
                    "done": np.zeros(buffer, np.float32)}
        self.size = self.pos = self.updates = 0

    def epsilon(self, step: int) -> float:
        start, end, span = self.eps
        return end + (start - end) * max(0.0, 1.0 - step / max(1, span))

    def load(self, step: int) -> int:
        """Collect env steps (enough to fill the warm-up on the first call) into the buffer."""
        rounds = 1 if self.size >= self.warmup else -(-self.warmup // self.env.n)
        for _ in range(rounds):
            obs = self.env.obs
            with torch.no_grad():
                greedy = self.model(torch.from_numpy(obs).to(self.device)).argmax(1).cpu().numpy()
            explore = self.rng.random(self.env.n) < self.epsilon(step)
            actions = np.where(explore, self.rng.integers(ACTIONS, size=self.env.n), greedy)
            next_obs, reward, terminated, _ = self.env.step(actions)
            for i in range(self.env.n):  # a truncated episode is not a terminal state
                b = self.buf
                b["obs"][self.pos], b["next"][self.pos] = obs[i], next_obs[i]
                b["action"][self.pos], b["reward"][self.pos] = actions[i], reward[i]
                b["done"][self.pos] = float(terminated[i])
                self.pos = (self.pos + 1) % self.capacity
                self.size = min(self.size + 1, self.capacity)
        return step

    def prepare(self, raw: int) -> dict[str, torch.Tensor]:
        idx = self.rng.integers(self.size, size=self.batch_size)
        return {k: torch.from_numpy(v[idx]) for k, v in self.buf.items()}

    def compute(self, batch: dict[str, torch.Tensor]) -> float:
        b = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        q = self.model(b["obs"]).gather(1, b["action"][:, None]).squeeze(1)
        with torch.no_grad():
            best_next = self.target(b["next"]).max(1).values
            target = b["reward"] + self.gamma * (1.0 - b["done"]) * best_next
        loss = F.smooth_l1_loss(q, target)
        loss.backward()
        return float(loss.detach())

    def apply(self) -> None:
        super().apply()
        self.updates += 1
        if self.updates % self.target_every == 0:
            self.target.load_state_dict(self.model.state_dict())

    def extra_state(self) -> dict[str, Any]:
        n = self.size
        return {**self._base_state(), "size": n, "pos": self.pos, "updates": self.updates,
                "target": self.target.state_dict(),
                "buffer": {k: torch.from_numpy(v[:n].copy()) for k, v in self.buf.items()}}

    def load_extra_state(self, d: dict[str, Any]) -> None:
        self._load_base(d)
        self.size, self.pos, self.updates = int(d["size"]), int(d["pos"]), int(d["updates"])
        self.target.load_state_dict(d["target"])
        for k, v in d["buffer"].items():
            self.buf[k][:self.size] = v.numpy()


class ActorCritic(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(OBS_DIM, hidden), torch.nn.Tanh(),
                                        torch.nn.Linear(hidden, hidden), torch.nn.Tanh())
        self.policy = torch.nn.Linear(hidden, ACTIONS)
        self.value = torch.nn.Linear(hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.policy(h), self.value(h).squeeze(-1)


class A2C(_RLBase):
    """Synchronous advantage actor-critic: n-step rollouts from parallel environments."""

    name = "a2c"

    def __init__(self, common: Common, hidden: int = 64, n_envs: int = 8, n_steps: int = 5,
                 gamma: float = 0.99, value_coef: float = 0.5, entropy_coef: float = 0.01):
        torch.manual_seed(common.seed)
        lr = common.lr if common.lr is not None else 3e-3
        super().__init__(ActorCritic(hidden), lr, common, n_envs)
        self.n_steps, self.gamma = n_steps, gamma
        self.value_coef, self.entropy_coef = value_coef, entropy_coef

    def load(self, step: int) -> dict[str, np.ndarray]:
        """Roll every environment `n_steps` forward with the current policy."""
        obs, actions, rewards, ends = [], [], [], []
        for _ in range(self.n_steps):
            o = self.env.obs
            with torch.no_grad():
                logits, _ = self.model(torch.from_numpy(o).to(self.device))
                probs = torch.softmax(logits, -1).cpu().numpy().astype(np.float64)
            a = (self.rng.random(self.env.n)[:, None] > np.cumsum(probs, 1)).sum(1)
            a = np.minimum(a, ACTIONS - 1)
            _, r, terminated, truncated = self.env.step(a)
            obs.append(o)
            actions.append(a)
            rewards.append(r)
            ends.append(terminated | truncated)  # a cut episode is treated as ended (simple)
        return {"obs": np.stack(obs), "action": np.stack(actions), "reward": np.stack(rewards),
                "end": np.stack(ends).astype(np.float32), "last": self.env.obs}

    def prepare(self, raw: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in raw.items()}

    def compute(self, batch: dict[str, torch.Tensor]) -> float:
        b = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        t, n = b["action"].shape
        logits, values = self.model(b["obs"].reshape(t * n, OBS_DIM))
        with torch.no_grad():
            _, ret = self.model(b["last"])
            returns = torch.empty(t, n, device=self.device)
            for i in reversed(range(t)):
                ret = b["reward"][i] + self.gamma * (1.0 - b["end"][i]) * ret
                returns[i] = ret
        returns = returns.reshape(-1)
        logp = torch.log_softmax(logits, -1)
        advantage = returns - values.detach()
        chosen = logp.gather(1, b["action"].reshape(-1, 1)).squeeze(1)
        entropy = -(logp.exp() * logp).sum(-1).mean()
        loss = (-(chosen * advantage).mean() + self.value_coef * F.mse_loss(values, returns)
                - self.entropy_coef * entropy)
        loss.backward()
        return float(loss.detach())

    def extra_state(self) -> dict[str, Any]:
        return self._base_state()

    def load_extra_state(self, d: dict[str, Any]) -> None:
        self._load_base(d)


def make(kind: str, **config: Any) -> Workload:
    common, extra = Common.split(config)
    cls = {"dqn": DQN, "a2c": A2C}.get(kind)
    if cls is None:
        raise ValueError(f"unknown RL workload {kind!r}")
    known = set(inspect.signature(cls.__init__).parameters) - {"self", "common"}
    reject_unknown(kind, {k: v for k, v in extra.items() if k not in known})
    return cls(common, **extra)

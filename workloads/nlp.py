"""Language-model workloads: a small BERT-like encoder (masked tokens) and GPT-2-like decoder.

Written in plain torch (no downloads, sizes configurable) so a CPU can train them. Both read
token windows of the seeded grammar corpus from disk in the io stage; `bert` masks 15% of the
tokens in the cpu stage (80% <mask>, 10% random, 10% kept, as BERT does) and predicts them;
`gpt2` predicts every next token under a causal mask. The corpus has real structure, so the
loss falls well below the uniform-guess level within a few dozen steps.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from workloads.base import Common, Workload, reject_unknown, seeded, torch_device
from workloads.data import VOCAB, RecordFile, grammar_corpus, read_records

MASK_ID, PAD_ID = VOCAB.index("<mask>"), VOCAB.index("<pad>")
IGNORE = -100


class TinyTransformer(torch.nn.Module):
    """Token + learned position embeddings, pre-norm transformer layers, a vocabulary head."""

    def __init__(self, vocab: int, seq_len: int, d_model: int, layers: int, heads: int,
                 ff: int, dropout: float, causal: bool):
        super().__init__()
        self.causal = causal
        self.tok = torch.nn.Embedding(vocab, d_model)
        self.pos = torch.nn.Embedding(seq_len, d_model)
        layer = torch.nn.TransformerEncoderLayer(d_model, heads, ff, dropout, activation="gelu",
                                                 batch_first=True, norm_first=True)
        self.body = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        h = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        mask = None
        if self.causal:
            mask = torch.nn.Transformer.generate_square_subsequent_mask(n, device=ids.device)
        return self.head(self.norm(self.body(h, mask=mask, is_causal=self.causal)))


class LanguageModel(Workload):
    """`bert` (masked-token) or `gpt2` (next-token) on the grammar corpus."""

    def __init__(self, kind: str, common: Common, seq_len: int = 32, d_model: int = 64,
                 layers: int = 2, heads: int = 4, ff: int = 128, dropout: float = 0.0,
                 corpus_tokens: int = 200_000, mask_prob: float = 0.15):
        if kind not in ("bert", "gpt2"):
            raise ValueError(f"unknown language model {kind!r}")
        self.name = kind
        self.seq_len, self.mask_prob = int(seq_len), float(mask_prob)
        self.batch_size = common.batch_size or 16
        # gpt2 reads one token more per row: the last input's target
        self.window = self.seq_len + (1 if kind == "gpt2" else 0)
        device = torch_device(common.device)
        torch.manual_seed(common.seed)
        model = TinyTransformer(len(VOCAB), self.seq_len, d_model, layers, heads, ff, dropout,
                                causal=kind == "gpt2").to(device)
        lr = common.lr if common.lr is not None else 3e-3
        super().__init__(model, torch.optim.AdamW(model.parameters(), lr=lr), device, common)
        self.data = RecordFile.ensure(common.data_path, f"grammar-{int(corpus_tokens)}",
                                      lambda: grammar_corpus(int(corpus_tokens), seed=0))
        self._throttle = common.throttle

    def load(self, step: int) -> tuple[int, bytes]:
        n = self.batch_size * self.window
        first = self.data.batch_range(step, n, self.common.rank, self.common.world_size)
        return step, read_records(self.data, first, n, self._throttle)

    def prepare(self, raw: tuple[int, bytes]) -> tuple[torch.Tensor, torch.Tensor]:
        step, data = raw
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
        tokens = torch.from_numpy(ids).view(self.batch_size, self.window)
        if self.name == "gpt2":
            return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        g = seeded(self.common.seed, self.common.rank, step)
        chosen = torch.rand(tokens.shape, generator=g) < self.mask_prob
        targets = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
        roll = torch.rand(tokens.shape, generator=g)
        inputs = tokens.clone()
        inputs[chosen & (roll < 0.8)] = MASK_ID
        swap = chosen & (roll >= 0.8) & (roll < 0.9)
        inputs[swap] = torch.randint(len(VOCAB), tokens.shape, generator=g)[swap]
        return inputs, targets

    def compute(self, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        inputs, targets = batch
        self.model.train()
        logits = self.model(inputs.to(self.device, non_blocking=True))
        targets = targets.to(self.device, non_blocking=True)
        if self.name == "bert" and not bool((targets != IGNORE).any()):
            loss = logits.sum() * 0.0  # nothing masked this step: zero grads, same graph
        else:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=IGNORE)
        loss.backward()
        return float(loss.detach())


def make(kind: str, **config: Any) -> LanguageModel:
    common, extra = Common.split(config)
    keys = ("seq_len", "d_model", "layers", "heads", "ff", "dropout", "corpus_tokens",
            "mask_prob")
    own = {k: extra.pop(k) for k in keys if k in extra}
    reject_unknown(kind, extra)
    return LanguageModel(kind, common, **own)

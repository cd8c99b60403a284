"""Image classification workloads: torchvision architectures on real (small) images.

The architectures are torchvision's, built with weights=None and num_classes=10 (nothing is
downloaded). The images are scikit-learn's bundled handwritten digits upsampled to
`input_size` (default 32) so the models run on a CPU. VGG's stock head (a 7x7 pool into
4096-wide layers, 120M parameters) suits 224-pixel ImageNet, not 32-pixel inputs, so by
default VGG gets the compact CIFAR-style head (global pool, one linear layer), and `width`
divides its channel counts so a test can afford it; `head="torchvision"` and `width=1` give
the stock network.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from workloads.base import Common, Workload, reject_unknown, seeded, torch_device
from workloads.data import RecordFile, digits_images, read_records

ARCHS = ("resnet18", "vgg16", "vgg19", "shufflenet_v2_x1_0")
_VGG_CFG = {"vgg16": "D", "vgg19": "E"}
NUM_CLASSES = 10
# mean/std of the upsampled digits (0..1 scale), measured once; any fixed pair would do
_MEAN, _STD = 0.19, 0.32
_DEFAULT_LR = {"vgg16": 3e-4, "vgg19": 3e-4}  # no batch norm in VGG: a gentler step


def build_model(arch: str, width: int = 1, head: str = "compact") -> torch.nn.Module:
    import torchvision

    if arch in _VGG_CFG:
        if width == 1 and head == "torchvision":
            return getattr(torchvision.models, arch)(weights=None, num_classes=NUM_CLASSES)
        from torchvision.models.vgg import VGG, cfgs, make_layers

        cfg = [c if c == "M" else max(1, int(c) // width) for c in cfgs[_VGG_CFG[arch]]]
        model = VGG(make_layers(cfg, batch_norm=False), num_classes=NUM_CLASSES)
        if head == "compact":
            channels = cfg[-2]
            model.avgpool = torch.nn.AdaptiveAvgPool2d(1)
            model.classifier = torch.nn.Sequential(torch.nn.Flatten(),
                                                   torch.nn.Linear(channels, NUM_CLASSES))
        elif head != "torchvision":
            raise ValueError(f"head must be 'compact' or 'torchvision', got {head!r}")
        return model
    if width != 1:
        raise ValueError(f"width applies to VGG only, not {arch}")
    return getattr(torchvision.models, arch)(weights=None, num_classes=NUM_CLASSES)


class ImageClassification(Workload):
    """One torchvision classifier trained on the digits file with shift augmentation."""

    def __init__(self, arch: str, common: Common, input_size: int = 32, width: int = 1,
                 head: str = "compact", shift: int = 2):
        if arch not in ARCHS:
            raise ValueError(f"unknown CV architecture {arch!r}")
        if input_size < 8:
            raise ValueError(f"input_size must be >= 8, got {input_size}")
        self.name = arch
        self.input_size, self.shift = int(input_size), int(shift)
        self.batch_size = common.batch_size or 32
        device = torch_device(common.device)
        torch.manual_seed(common.seed)  # same initial weights on every rank
        model = build_model(arch, width=width, head=head).to(device)
        lr = common.lr if common.lr is not None else _DEFAULT_LR.get(arch, 1e-3)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        super().__init__(model, opt, device, common)
        self.data = RecordFile.ensure(common.data_path, f"digits-{self.input_size}",
                                      lambda: digits_images(self.input_size, seed=0))
        self._throttle = common.throttle

    def load(self, step: int) -> tuple[int, bytes]:
        first = self.data.batch_range(step, self.batch_size, self.common.rank,
                                      self.common.world_size)
        return step, read_records(self.data, first, self.batch_size, self._throttle)

    def prepare(self, raw: tuple[int, bytes]) -> tuple[torch.Tensor, torch.Tensor]:
        step, data = raw
        rows = np.frombuffer(data, dtype=np.uint8).reshape(self.batch_size, -1)
        labels = torch.from_numpy(rows[:, 0].astype(np.int64))
        s = self.input_size
        x = torch.from_numpy(rows[:, 1:].astype(np.float32)).view(-1, 1, s, s) / 255.0
        x = (x - _MEAN) / _STD
        if self.shift > 0:  # random translation: pad, then crop each image at its own offset
            g = seeded(self.common.seed, self.common.rank, step)
            padded = F.pad(x, [self.shift] * 4)
            offs = torch.randint(0, 2 * self.shift + 1, (self.batch_size, 2), generator=g)
            x = torch.stack([padded[i, :, dy:dy + s, dx:dx + s]
                             for i, (dy, dx) in enumerate(offs.tolist())])
        return x.expand(-1, 3, -1, -1).contiguous(), labels

    def compute(self, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        x, y = batch
        self.model.train()
        logits = self.model(x.to(self.device, non_blocking=True))
        loss = F.cross_entropy(logits, y.to(self.device, non_blocking=True))
        loss.backward()
        return float(loss.detach())


def make(arch: str, **config: Any) -> ImageClassification:
    common, extra = Common.split(config)
    keys = ("input_size", "width", "head", "shift")
    own = {k: extra.pop(k) for k in keys if k in extra}
    reject_unknown(arch, extra)
    return ImageClassification(arch, common, **own)

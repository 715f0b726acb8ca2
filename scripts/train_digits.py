"""Train the samples digits_layerscale and digits_stateful on scikit-learn's handwritten digits.

Both train on the first 1,437 digits (one CPU thread, fixed seeds, torch's deterministic algorithms:
the same weights on every run of the same torch) and are scored on the last 360 (top-1). Writes
sample_models/data/digits_layerscale.pt, digits_stateful.pt (state_dicts) and digits.json (seeds,
epochs, accuracies); tests/test_trained_samples.py trains both again and checks the accuracy.

    .venv/bin/python scripts/train_digits.py
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sample_models import digits

# name -> (class, epochs, learning rate, batch size); Adam, cross-entropy.
RECIPES = {
    "digits_layerscale": (digits.DigitsLayerScale, 12, 0.01, 32),
    "digits_stateful": (digits.DigitsStateful, 40, 0.03, 128),
}


@contextmanager
def deterministic():
    """One thread and deterministic kernels while training (the thread count changes float sums)."""
    threads, strict = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(strict)


def logits_of(model, images: torch.Tensor) -> torch.Tensor:
    """The final logits: the whole image for the layer-scale net, the 8th column's for the stateful one."""
    if isinstance(model, digits.DigitsStateful):
        state = torch.zeros(images.shape[0], *model.state.shape[1:])
        for (column,) in model.columns(images):
            logits, state = model.step(column, state)
        return logits
    return model(images)


def train(name: str) -> tuple[dict[str, torch.Tensor], float]:
    """Train sample ``name`` from its seed: (its state_dict, top-1 on the 360 held-out digits)."""
    cls, epochs, lr, batch_size = RECIPES[name]
    images, labels = digits.split("train")
    with deterministic():
        torch.manual_seed(cls.SEED)
        model = cls(trained=False).train()
        order = torch.Generator().manual_seed(cls.SEED)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        for _ in range(epochs):
            for batch in torch.randperm(len(images), generator=order).split(batch_size):
                optimizer.zero_grad()
                F.cross_entropy(logits_of(model, images[batch]), labels[batch]).backward()
                optimizer.step()
        model.eval()
        top1 = model.top1(*digits.split("held-out"))
    return model.state_dict(), top1


def main() -> None:
    record = {"data": "sklearn.datasets.load_digits, pixels / 16; train: the first 1,437, held out: the last 360",
              "torch": torch.__version__, "optimizer": "Adam"}
    for name, (cls, epochs, lr, batch_size) in RECIPES.items():
        start = time.perf_counter()
        weights, top1 = train(name)
        torch.save(weights, digits.DATA / cls.WEIGHTS)
        record[name] = {"seed": cls.SEED, "epochs": epochs, "learning_rate": lr, "batch": batch_size,
                        "held_out_top1": round(top1, 4),
                        "held_out_correct": round(top1 * 360)}
        print(f"{name}: top-1 {top1:.2%} on the 360 held-out digits ({time.perf_counter() - start:.1f} s)")
    digits.RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print("wrote", digits.RECORD)


if __name__ == "__main__":
    main()

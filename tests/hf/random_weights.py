"""Random weights for the Hugging Face oracles: a weight mapped to the wrong place changes the logits."""

from __future__ import annotations

import torch


def randomized(model: torch.nn.Module, std: float = 0.3, keep: tuple[str, ...] = ()) -> torch.nn.Module:
    """Every parameter drawn at random (matrices with ``std``, vectors with 0.1, norm gains near 1), but those
    whose name holds one of ``keep`` (fixed sinusoids), so that a bias or norm mapped wrong shows; in eval mode."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not any(part in name for part in keep):
                parameter.normal_(std=std if parameter.dim() > 1 else 0.1)
        for module in model.modules():  # torch's LayerNorm and the models' own (DebertaLayerNorm)
            if "LayerNorm" in type(module).__name__ and getattr(module, "weight", None) is not None:
                module.weight.add_(1.0)
    return model.eval()

"""Dropout off for RL: the policy and critic must score a sequence the same way every time.

PPO's ratio ``exp(logp - old_logp)`` compares two forwards of the same tokens; with dropout
active in the training forward the ratio is noise even before any update (verl and OpenRLHF turn
dropout off too). ``module.eval()`` is not the answer: HF activation checkpointing only runs in
training mode. So every dropout probability is set to 0 instead, leaving the mode alone:

- every ``nn.Dropout``-family module gets ``p = 0``;
- float attributes named like a dropout probability (``attention_dropout`` in Qwen2/Llama
  attention layers, ``*_dropout``, ``*_pdrop``) on any submodule are set to 0, because many HF
  attention implementations pass them to the kernel as a number, not through a module;
- the same keys of every ``config`` found on the modules are set to 0 (code that reads
  ``self.config.attention_dropout`` at forward time; an exported model records 0).
"""

from __future__ import annotations

from typing import Any

from torch import nn


def _is_dropout_name(name: str) -> bool:
    return name.endswith(("dropout", "pdrop", "dropout_prob", "dropout_rate"))


def _zero_float_attrs(obj: Any, names: list[str]) -> int:
    changed = 0
    for name in names:
        value = getattr(obj, name, None)
        if _is_dropout_name(name) and isinstance(value, float) and not isinstance(value, bool):
            if value != 0.0:
                changed += 1
            setattr(obj, name, 0.0)
    return changed


def disable_dropout(module: nn.Module) -> int:
    """Set every dropout probability in ``module`` (modules, attributes, configs) to 0, in place.

    Args:
        module: any model, e.g. an HF causal LM or ``rlvr.learner.modules.CriticModel``; its
            training/eval mode is not changed.

    Returns:
        How many non-zero probabilities were set to 0.
    """
    changed = 0
    configs: dict[int, Any] = {}
    for sub in module.modules():
        if isinstance(sub, nn.modules.dropout._DropoutNd):
            changed += int(sub.p != 0.0)
            sub.p = 0.0
        changed += _zero_float_attrs(sub, list(vars(sub)))
        config = getattr(sub, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            configs[id(config)] = config
    for config in configs.values():
        changed += _zero_float_attrs(config, list(config.to_dict()))
    return changed


__all__ = ["disable_dropout"]

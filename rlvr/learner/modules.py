"""Model builders: the policy (an HF causal LM) and the critic (a backbone plus a value head).

The critic is the causal LM's backbone (``AutoModel``, i.e. without the LM head) with a scalar
``nn.Linear(hidden, 1)`` value head applied to every position. It is initialised from the
actor's model directory or from its own; the value head is zero-initialised (every value starts
at 0, a neutral baseline) unless the directory holds a saved ``value_head.safetensors``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

VALUE_HEAD_FILE = "value_head.safetensors"


def load_causal_lm(path: str | Path, device: torch.device, dtype: torch.dtype = torch.float32):
    """Load an HF causal LM in ``dtype`` (master weights; fp32 by default) onto ``device``.

    Returns:
        A ``transformers.PreTrainedModel`` with an LM head.
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    model.to(device)  # type: ignore[arg-type]  # nn.Module.to, not the HF decorator
    return model


class CriticModel(nn.Module):
    """A causal-LM backbone with a scalar value head per token.

    Attributes:
        backbone: the transformer without its LM head (``transformers.AutoModel``).
        value_head: ``nn.Linear(hidden_size, 1)``.
    """

    def __init__(self, backbone: nn.Module, value_head: nn.Linear) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = value_head

    @classmethod
    def from_pretrained(
        cls, path: str | Path, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> CriticModel:
        """Build a critic from a causal-LM (or saved critic) directory.

        Args:
            path: an HF model directory; its backbone weights are loaded and, if present,
                ``value_head.safetensors`` too.
            device: where the model lives.
            dtype: master dtype of the weights.
        """
        from transformers import AutoModel

        backbone = AutoModel.from_pretrained(str(path), dtype=dtype)
        head = nn.Linear(backbone.config.hidden_size, 1, dtype=dtype)
        saved = Path(path) / VALUE_HEAD_FILE
        if saved.is_file():
            from safetensors.torch import load_file

            head.load_state_dict(load_file(str(saved)))
        else:
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)
        return cls(backbone, head).to(device)

    @classmethod
    def empty(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> CriticModel:
        """The critic of ``path``'s ``config.json`` on the meta device (no weights read)."""
        from transformers import AutoConfig, AutoModel

        config = AutoConfig.from_pretrained(str(path))
        with torch.device("meta"):  # buffers keep from_pretrained's dtypes (see empty_causal_lm)
            backbone = AutoModel.from_config(config, dtype=dtype)
            head = nn.Linear(config.hidden_size, 1, dtype=dtype)
        return cls(backbone, head)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Values of the positions ``keep`` (all positions when None).

        Args:
            input_ids: ``(B, T)`` token ids.
            attention_mask: ``(B, T)``, 1 on real tokens.
            position_ids: ``(B, T)``.
            keep: ``(K,)`` int64 column indices, the same for every row.

        Returns:
            ``(B, K)`` float32 values (``(B, T)`` when ``keep`` is None).
        """
        hidden = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
        ).last_hidden_state
        if keep is not None:
            hidden = hidden[:, keep]
        # A fresh tensor, not a view: FSDP2's pre-backward hook must not be bypassed by a
        # later in-place op on the output.
        return self.value_head(hidden).squeeze(-1).to(torch.float32, copy=True)


__all__ = ["VALUE_HEAD_FILE", "CriticModel", "load_causal_lm"]

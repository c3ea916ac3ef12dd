"""CPU stand-in for ``sgl_kernel.mamba`` (linear-attention kernels; dense models skip them)."""

from __future__ import annotations

from sgl_kernel import _missing

chunk_gated_delta_rule_cpu = _missing("mamba.chunk_gated_delta_rule_cpu")
causal_conv1d_fn_cpu = _missing("mamba.causal_conv1d_fn_cpu")
causal_conv1d_update_cpu = _missing("mamba.causal_conv1d_update_cpu")

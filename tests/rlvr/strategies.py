"""Hypothesis strategies shared by the tensor-math tests (imported by test modules only)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st


@st.composite
def masks(draw: st.DrawFn, b: int, n: int) -> torch.Tensor:
    """A ``(b, n)`` float tensor of 0s and 1s."""
    rows = st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n)
    return torch.tensor(draw(st.lists(rows, min_size=b, max_size=b)))

"""``rlvr.algorithms.aggregate`` at its edges: non-square masks, exact float64 formulas, 1-D inputs.

Each test asserts a value the documented formula gives; together they fail on every small
change of the module (``bash dev.sh mutate rlvr/algorithms/aggregate.py``).
"""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithms.aggregate import aggregate, normaliser, part_mode, part_weights
from rlvr.errors import ConfigError, ShapeError, UnknownNameError

T = torch.tensor
F64 = torch.float64

# 4 rows x 3 columns: rows 0, 1 and 3 have valid tokens (3 non-empty rows) but only columns
# 0 and 1 do (2 non-empty columns): a mode counting columns gives another value
LOSS = T([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0], [64.0, 128.0, 256.0], [3.0, 5.0, 7.0]], dtype=F64)
MASK = T([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]], dtype=F64)
ROW_SUMS = [3.0, 8.0, 8.0]
ROW_COUNTS = [2.0, 1.0, 2.0]


def test_seq_mean_modes_average_over_non_empty_rows_not_columns():
    assert aggregate(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx(19.0 / 3)
    per_row = [s / (c + 1e-8) for s, c in zip(ROW_SUMS, ROW_COUNTS)]
    want = sum(per_row) / (3 + 1e-8)
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(want, rel=1e-14)
    # the default constant is the padded width, 3
    norm = aggregate(LOSS, MASK, "seq-mean-token-sum-norm").item()
    assert norm == pytest.approx(19.0 / 3 / 3)
    assert normaliser(MASK, "seq-mean-token-sum") == 3.0
    assert normaliser(MASK, "seq-mean-token-sum-norm") == 3.0
    assert normaliser(MASK, "token-mean") == 5.0


def test_token_modes():
    assert aggregate(LOSS, MASK, "token-sum").item() == 19.0
    assert aggregate(LOSS, MASK).item() == pytest.approx(19.0 / 5)  # token-mean by default


def test_token_modes_accept_1d_and_seq_modes_do_not():
    loss, mask = T([1.0, 2.0, 3.0]), T([1.0, 0.0, 1.0])
    assert aggregate(loss, mask, "token-sum").item() == 4.0
    with pytest.raises(ShapeError, match=r"seq-mean-token-sum needs \(batch, response_len\)"):
        aggregate(loss, mask, "seq-mean-token-sum")


def test_a_norm_constant_of_one_divides_by_one():
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=1.0).item() == (
        pytest.approx(19.0 / 3))


def test_unknown_modes_are_rejected_everywhere():
    for call in (lambda: part_mode("mean"), lambda: part_weights("mean", [1.0], 1.0),
                 lambda: normaliser(MASK, "mean"), lambda: aggregate(LOSS, MASK, "mean")):
        with pytest.raises(UnknownNameError, match="unknown loss aggregation mode 'mean'"):
            call()


def test_part_mode_and_part_weights_per_mode():
    assert part_mode("seq-mean-token-sum-norm") == "seq-mean-token-sum"
    assert part_mode("token-mean") == "token-mean"
    assert part_weights("seq-mean-token-mean", [1.0, 3.0], 4.0) == [0.25, 0.75]
    assert part_weights("seq-mean-token-sum-norm", [1.0, 3.0], 4.0, norm_constant=2.0) == [
        0.125, 0.375
    ]
    assert part_weights("seq-mean-token-sum-norm", [1.0], 4.0, norm_constant=1.0) == [0.25]
    with pytest.raises(ConfigError, match="norm_constant must be > 0 for seq-mean-token-sum-norm"):
        part_weights("seq-mean-token-sum-norm", [1.0], 4.0, norm_constant=0.0)

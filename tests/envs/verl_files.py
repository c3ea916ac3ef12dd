"""Rows and parquet files in verl's RL data layout, for the tests that read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def verl_row(index: int, question: str, truth: Any, *, system: str | None = None,
             ability: str = "math", source: str = "openai/gsm8k") -> dict[str, Any]:
    prompt = [{"role": "user", "content": question}]
    if system is not None:
        prompt.insert(0, {"role": "system", "content": system})
    return {
        "data_source": source,
        "prompt": prompt,
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": "train", "index": index, "question": question},
    }


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import datasets

    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path

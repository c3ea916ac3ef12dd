"""The README's verifiers example runs as written and gives what it says."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_verifiers_example_runs():
    section = README.read_text(encoding="utf-8").split("## Verifiers", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    lines = code.strip().splitlines()
    imports = [line for line in lines if line.startswith("from ")]
    calls = [line.split("  #")[0] for line in lines if line and not line.startswith("from ")]
    scope: dict = {}
    exec("\n".join(imports), scope)  # noqa: S102
    results = [eval(call, scope) for call in calls]  # noqa: S307
    assert results[0].passed and results[0].reason == "correct"
    assert results[1].passed and results[1].score == 1.0
    assert results[2][0].name == "calculator" and results[2][0].arguments == {"expression": "2+2"}

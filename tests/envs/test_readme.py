import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _section_code():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Register your own environment", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section has exactly one python example"
    return blocks[0]


def test_readme_example_runs(clean_registry, capsys):
    code = _section_code()
    assert 25 <= len(code.strip().splitlines()) <= 50
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})  # noqa: S102
    out = capsys.readouterr().out.strip()
    assert re.fullmatch(r"reverse/train/\d 1\.0 True correct", out), out
    assert "mypkg/Reverse-v0" in clean_registry

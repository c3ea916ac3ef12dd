"""Mutation check: does each module's own test suite fail when the module is wrong?

``bash dev.sh mutate [FILE ...]`` (or ``python tools/mutate/check.py [FILE ...]``) applies each
mutant of ``mutants.py`` to a module, one at a time, and runs that module's tests (listed in
``targets.txt``) with ``pytest -x``. A mutant is *killed* when the tests fail (or time out),
*survived* when they pass. Survivors judged equivalent (they change nothing observable) are
listed once in ``equivalent.txt`` with a reason; they are counted, not reported. Every other
survivor is printed with its line and change, and the check exits 1.

Everything runs in a temporary copy of the repository (the files git tracks or would track),
so the working tree is never left mutated, even when the check is interrupted. One process
imports the test suite's heavy dependencies (torch...) once and forks a child per mutant; the
child imports the project fresh from the copy, so a mutant costs the tests' own time, not
torch's import. Hypothesis runs derandomised, without its example database or deadlines, so a
mutant's verdict does not depend on the order, the load of the machine or an earlier run.
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import Mutant, check_compiles, mutants  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROJECT_PACKAGES = ("rlvr", "envs", "agents", "verifiers", "tests", "conftest", "tools")


# ---------------------------------------------------------------------------- the two lists
def read_targets(path: Path = HERE / "targets.txt") -> dict[str, list[str]]:
    """``module path -> its tests``, from ``targets.txt`` (``module: test test ...``).

    A test is a file or a pytest node id (``file::test_name``).
    """
    targets: dict[str, list[str]] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        module, sep, tests = line.partition(":")
        if not sep or not tests.split():
            raise SystemExit(f"{path}:{n}: expected 'module.py: test_file ...'; got {raw!r}")
        targets[module.strip()] = tests.split()
    return targets


@dataclass
class Equivalent:
    """A survivor judged equivalent: ``file :: key :: reason`` in ``equivalent.txt``."""

    file: str
    key: str
    reason: str
    line: int
    used: bool = False


def read_equivalents(path: Path = HERE / "equivalent.txt") -> dict[tuple[str, str], Equivalent]:
    """``(file, mutant key) -> Equivalent``; every entry must carry a reason."""
    out: dict[tuple[str, str], Equivalent] = {}
    if not path.exists():
        return out
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in raw.split(" :: ")]
        if len(parts) != 3 or not all(parts):
            raise SystemExit(f"{path}:{n}: expected 'file :: mutant :: reason'; got {raw!r}")
        file, key, reason = parts
        if (file, key) in out:
            raise SystemExit(f"{path}:{n}: {file} :: {key} is listed twice")
        out[(file, key)] = Equivalent(file, key, reason, n)
    return out


# ---------------------------------------------------------------------------- the sandbox copy
@contextmanager
def repo_copy() -> Iterator[Path]:
    """A temporary copy of the files git tracks or would track (removed afterwards)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-mutate-"))
    try:
        for rel in filter(None, listed):
            src = ROOT / rel
            if src.is_file():
                dst = tmp / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def third_party_imports(files: list[Path]) -> list[str]:
    """Top-level modules the files import that are not the project's (to import them once)."""
    names: set[str] = {"pytest", "hypothesis"}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return sorted(n for n in names if n not in PROJECT_PACKAGES and n != "__future__")


# ---------------------------------------------------------------------------- one test run
def run_tests(copy: Path, tests: list[str], timeout: float, log: Path) -> tuple[bool, float]:
    """Run ``tests`` in a forked child; ``(passed, seconds)``. A timeout counts as failed."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: import the project from the copy, run pytest, exit
        os.setpgid(0, 0)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        rc = 1
        try:
            import pytest

            sys.dont_write_bytecode = True
            sys.argv = ["pytest"]
            rc = int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--no-header",
                                  "--assert=plain", "-W", "ignore::DeprecationWarning",
                                  "-W", "ignore::pytest.PytestAssertRewriteWarning", *tests]))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    deadline = start + timeout
    try:
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status) == 0, time.monotonic() - start
            time.sleep(0.02)
    finally:  # a timeout, or the check interrupted: end the tests (their process group)
        try:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    return False, time.monotonic() - start


def prepare_parent(copy: Path, test_files: list[Path], module: Path) -> None:
    """Import the heavy dependencies once; never the project (each child imports it fresh)."""
    os.chdir(copy)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    sys.path.insert(0, str(copy))
    os.environ["PYTHONPATH"] = str(copy)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one mutant at a time, on a shared machine
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # what `import rlvr` sets
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    import importlib

    for name in third_party_imports([*test_files, module, copy / "tests" / "conftest.py"]):
        try:
            importlib.import_module(name)
        except Exception:  # an optional dependency or a stdlib oddity: the child will see
            pass
    from importlib.metadata import entry_points

    for plugin in entry_points(group="pytest11"):  # pytest's plugins, loaded once here
        try:
            plugin.load()
        except Exception:
            pass
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "mutate", derandomize=True, database=None, deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    settings.load_profile("mutate")
    for name in list(sys.modules):  # nothing of the project may outlive the import above
        if name.split(".")[0] in PROJECT_PACKAGES:
            del sys.modules[name]
    # The children's garbage collections (pytest runs some) then skip the parent's objects:
    # a collection would touch, and so copy, every page of the imported libraries.
    gc.collect()
    gc.freeze()


# ---------------------------------------------------------------------------- one module
@dataclass
class Result:
    """The verdicts on one module's mutants."""

    file: str
    total: int = 0
    killed: int = 0
    equivalent: int = 0
    survivors: list[Mutant] = field(default_factory=list)
    seconds: float = 0.0


def check_module(file: str, tests: list[str], equivalents: dict[tuple[str, str], Equivalent],
                 match: list[str] | None, indices: set[int], timeout_factor: float) -> Result:
    """Run every mutant of ``file`` against ``tests`` (in a forked child of a forked child)."""
    result = Result(file)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child per module: its imports do not leak into the next module's
        os.close(read_fd)
        signal.signal(signal.SIGTERM, _exit_on_signal)  # still removes its copy
        rc = 2
        try:
            rc = _check_module_child(file, tests, equivalents, match, indices, timeout_factor,
                                     write_fd)
        finally:
            os._exit(rc)
    os.close(write_fd)
    with os.fdopen(read_fd) as lines:
        for line in lines:  # progress and verdicts from the child, one line each
            kind, _, rest = line.rstrip("\n").partition("\t")
            if kind == "print":
                print(rest, flush=True)
            elif kind == "killed":
                result.killed += 1
            elif kind == "equivalent":
                equivalents[(file, rest)].used = True
                result.equivalent += 1
            elif kind == "survived":
                line_no, scope, before, after, occ = rest.split("\t")
                result.survivors.append(Mutant(int(line_no), scope, before, after, int(occ), ""))
            elif kind == "total":
                result.total = int(rest)
            elif kind == "seconds":
                result.seconds = float(rest)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"[mutate] {file}: the check itself failed (see above)")
    return result


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _check_module_child(file: str, tests: list[str],
                        equivalents: dict[tuple[str, str], Equivalent], match: list[str] | None,
                        indices: set[int], timeout_factor: float, fd: int) -> int:
    out = os.fdopen(fd, "w", buffering=1)

    def say(kind: str, *fields: object) -> None:
        if kind == "print":  # one message line per pipe line
            for line in "\t".join(map(str, fields)).splitlines():
                out.write(f"print\t{line}\n")
        else:
            out.write("\t".join([kind, *map(str, fields)]) + "\n")

    start = time.monotonic()
    with repo_copy() as copy:
        target = copy / file
        original = target.read_text()
        items = mutants(original)
        check_compiles(items)
        if match:
            items = [m for m in items if any(text in m.key for text in match)]
        if indices:  # numbers as a full run prints them ([i/N])
            items = [m for i, m in enumerate(items, 1) if i in indices]
        say("total", len(items))
        prepare_parent(copy, sorted({copy / t.split("::")[0] for t in tests}), target)
        log = copy / ".mutate.log"
        passed, base = run_tests(copy, tests, timeout=600, log=log)
        if not passed:
            say("print", f"[mutate] {file}: its tests fail without any mutant:\n"
                         + log.read_text()[-3000:])
            return 1
        timeout = max(10.0, timeout_factor * base)
        say("print", f"[mutate] {file}: {len(items)} mutants; tests {' '.join(tests)} "
                     f"take {base:.1f} s (timeout {timeout:.0f} s)")
        for i, m in enumerate(items, 1):
            target.write_text(m.source)
            try:
                passed, _ = run_tests(copy, tests, timeout, log)
            finally:
                target.write_text(original)
            if os.environ.get("RLVR_MUTATE_DEBUG"):
                say("print", f"--- {m.key}\n{log.read_text()[-1500:]}")
            if not passed:
                say("killed")
            elif (file, m.key) in equivalents:
                say("equivalent", m.key)
            else:
                say("survived", m.line, m.scope, m.before, m.after, m.occurrence)
                say("print", f"  SURVIVED {file}:{m.line} [{i}/{len(items)}] {m.key}")
    say("seconds", f"{time.monotonic() - start:.1f}")
    out.close()
    return 0


# ---------------------------------------------------------------------------- the report
def main(argv: list[str] | None = None) -> int:
    """Check the named modules (all of ``targets.txt`` by default); 1 if a real survivor."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="modules (default: every one in targets.txt)")
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    parser.add_argument("--match", action="append",
                        help="only the mutants whose key contains this text (repeatable: any)")
    parser.add_argument("--tests", nargs="+", metavar="TEST",
                        help="run these tests instead of targets.txt's (e.g. an older set)")
    parser.add_argument("--index", type=int, action="append",
                        help="only the i-th mutant of the file, as a full run numbers them "
                             "(repeatable)")
    parser.add_argument("--timeout-factor", type=float, default=5.0,
                        help="a mutant's tests time out at this times the clean run (min 10 s)")
    args = parser.parse_args(argv)
    targets = read_targets()
    files = args.files or list(targets)
    files = [str(Path(f).resolve().relative_to(ROOT)) if Path(f).exists() else f for f in files]
    unknown = [f for f in files if f not in targets]
    if unknown:
        raise SystemExit(f"[mutate] no tests listed for {unknown} in {HERE / 'targets.txt'}; "
                         f"known: {', '.join(targets)}")
    if args.tests:
        targets = {f: list(args.tests) for f in files}
    equivalents = read_equivalents()
    if args.list:
        for f in files:
            for m in mutants((ROOT / f).read_text()):
                tag = "  (equivalent)" if (f, m.key) in equivalents else ""
                print(f"{f}:{m.line}: {m.key}{tag}")
        return 0
    results = [check_module(f, targets[f], equivalents, args.match, set(args.index or ()),
                            args.timeout_factor) for f in files]
    print(f"\n{'module':<32} {'mutants':>7} {'killed':>7} {'survived':>8} {'equiv':>6} "
          f"{'time':>7}")
    for r in results:
        print(f"{r.file:<32} {r.total:>7} {r.killed:>7} {len(r.survivors):>8} "
              f"{r.equivalent:>6} {r.seconds:>6.0f}s")
    survivors = [(r.file, m) for r in results for m in r.survivors]
    if survivors:
        print(f"\n{len(survivors)} survivor(s): add a test that kills each, or list it in "
              f"{HERE.relative_to(ROOT)}/equivalent.txt with the reason it is equivalent:")
        for f, m in survivors:
            print(f"  {f}:{m.line}: {f} :: {m.key}")
    if not args.match and not args.index:
        stale = [e for e in equivalents.values() if e.file in files and not e.used]
        for e in stale:
            print(f"[mutate] equivalent.txt:{e.line}: {e.file} :: {e.key} was not a survivor "
                  "(killed now, or no longer a mutant): remove it")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())

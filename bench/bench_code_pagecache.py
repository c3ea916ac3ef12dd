"""Benchmark (not a test): bandwidth of the page-cache channel between two sandbox runs.

The host evicts a /usr file from its page cache (a sandbox cannot); a first program makes the
pages for its 1-bits resident by touching them (mmap + MADV_RANDOM, so no readahead); a second
program, in a later run, tells resident pages from cold ones by timing one access each and
returns the bits it read, as CallTests cases of CH bits (a case passes iff all CH bits are right).

Usage: .venv/bin/python bench/bench_code_pagecache.py [BITS] [CH]   (as root; see docs/sandbox.md)
"""
import os
import random
import sys
import time

from rlvr.verifiers.code import CallTests, SandboxPool

FILE = "/usr/lib/x86_64-linux-gnu/libicudata.a"  # 31 MB, used by nothing here
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
rng = random.Random(1)
bits = [rng.randrange(2) for _ in range(N)]
fd = os.open(FILE, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the host evicts (the sandbox cannot)
SEND = f'''
import os
import mmap
def f(bits):
    fd = os.open({FILE!r}, os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)  # no readahead: a fault reads just its page
    for i, b in enumerate(bits):
        if b:
            m[i * 4096]
    return 0
'''
RECV = f'''
import os, time
import mmap
def f(start, n):
    fd = os.open({FILE!r}, os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)
    out = []
    for i in range(start, start + n):
        t = time.perf_counter_ns()
        m[i * 4096]
        out.append(1 if time.perf_counter_ns() - t < 15000 else 0)
    m.close()
    os.close(fd)
    return out
'''
CH = int(sys.argv[2]) if len(sys.argv) > 2 else 128
cases = [((k * CH, CH), bits[k * CH:(k + 1) * CH]) for k in range(N // CH)]
with SandboxPool(size=2) as pool:
    pool.run_tests("def f(*a):\n    return 0\n", CallTests("f", [((), 0)]))
    t0 = time.monotonic()
    v = pool.run_tests(SEND, CallTests("f", [((bits,), 0)]), timeout_s=30)
    t1 = time.monotonic()
    v2 = pool.run_tests(RECV, CallTests("f", cases), timeout_s=30)
    t2 = time.monotonic()
wrong = [t["message"] for t in v2.details["tests"] if t["status"] != "passed"]
print(f"{v.reason} send {t1 - t0:.2f}s, receive {t2 - t1:.2f}s, {N} bits, "
      f"{len(cases) - len(wrong)}/{len(cases)} chunks of {CH} bits exact; "
      f"{N / (t2 - t0):.0f} bits/s")
for m in wrong[:2]:
    print(m[:300])

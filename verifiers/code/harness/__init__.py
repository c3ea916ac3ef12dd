"""The code that runs inside the sandbox: a warm "zygote" that forks one fresh process per program.

This package is stdlib-only and is run by the system interpreter (``/usr/bin/python3 -I -B -c``)
inside bubblewrap, together with :mod:`rlvr.verifiers.code.protocol` (the value codec, framing and
check-body splitter that the host uses too, so both sides share one definition). The host's
bootstrap (``sandbox.BOOTSTRAP``) installs these modules inside under their own names, then
starts :func:`~rlvr.verifiers.code.harness.zygote.main`. One topic a module:

- :mod:`~rlvr.verifiers.code.harness.zygote`: the zygote's loop (spawn, reset, reap);
- :mod:`~rlvr.verifiers.code.harness.namespace`: its mounts, ``/proc`` and network namespace,
  set up once and made fresh for every program;
- :mod:`~rlvr.verifiers.code.harness.privileges`: capabilities, dropping to a uid, rlimits;
- :mod:`~rlvr.verifiers.code.harness.seccomp`: the system calls every child is refused;
- :mod:`~rlvr.verifiers.code.harness.program`: U, the program's process;
- :mod:`~rlvr.verifiers.code.harness.tester`: T, the tester's process.

Processes inside one sandbox (one PID namespace, one private ``/tmp``)::

    zygote (pid 1, uid 0 with only CAP_SETUID/SETGID/KILL left, non-dumpable, child subreaper)
      U  the untrusted program, as the sandbox's program uid: its own session, rlimits, a seccomp
         filter, stdin/stdout/stderr pipes to the host
      T  the tester (AssertTests only), as the sandbox's tester uid (another uid, same filter):
         runs the trusted test code; every call of the program's functions is a round trip to U
         over a socket, with arguments and results converted to plain data by
         ``protocol.encode`` / ``protocol.decode``

Each sandbox gets its own pair of uids from the host (see ``sandbox.UidLease``), so
``RLIMIT_NPROC`` counts one sandbox's processes only, and U can signal, renice, ``prlimit`` or
``ptrace`` neither T nor the zygote (other uids, and the zygote is root). ``/proc`` is mounted
with ``hidepid=invisible``: a process sees only its own uid's processes.

Why this cannot be fooled:

* The zygote never holds job data: the host sends the program to U and the tests to T directly,
  over sockets whose host ends the zygote hands over by ``SCM_RIGHTS`` and closes. U is forked
  from the zygote, so U's memory holds no earlier program's tests.
* Results come only from T (or, for call and stdio tests, are judged by the host itself). U never
  holds T's socket, runs as another uid, and cannot see T in ``/proc``. Test code never shares an
  interpreter with the program, so exiting early, patching builtins, deleting ``check`` or
  printing markers in U changes nothing T reports; killing T is not possible (another uid).
* T takes from the program only its entry point: helpers the tests use are trusted source
  (``AssertTests.helpers``) run in T, so a program's ``abs``, ``range`` or ``poly`` cannot change
  what a test computes, and no value a test passes to a helper reaches the program.
* Values cross from U as tagged JSON of exact builtin types, so an object with a rigged
  ``__eq__`` never reaches the comparison; the program's exceptions reach the test code as the
  builtin class of the same name, except the iteration-protocol ones (``StopIteration``,
  ``StopAsyncIteration``), which become ``RuntimeError`` (as PEP 479 does for generators) so that
  they cannot end a test's ``all(map(candidate, xs))`` early.
* Nothing survives a run: the seccomp filter refuses SysV IPC, POSIX message queues and kernel
  keyrings (objects that outlive processes), new namespaces, ``io_uring``, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``ptrace`` and mounts; between programs the zygote
  SIGKILLs every other process in the namespace (``kill(-1)``), reaps them, and detaches
  ``/tmp`` and ``/dev/shm``; each program gets freshly mounted ones and U a network namespace of
  its own, so no file, directory time, xattr, tmpfs counter or socket state reaches a later run.
* No nonce is needed: a forged record could only come from a process that holds T's or the
  zygote's descriptors, and U holds neither (it holds no descriptor but its own channels; the
  host also checks that each control message carries the zygote's credentials, which the kernel
  attaches); what U itself sends is treated as data, never as a verdict.
"""


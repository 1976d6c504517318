"""Ctrl-C stops native runs (backends/cpu/runtime.py): `hlofuse run` on a module whose while
loop never ends exits 130 after SIGINT (and only then), a Python caller gets KeyboardInterrupt and
can call the executable again, and a program with its own SIGINT handler keeps its behaviour.

Each case runs in a subprocess (its own signal dispositions, nothing shared with pytest's), on a
cache warmed by the test process so the child starts running native code quickly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import hlofuse
from hlofuse.backends import cpu

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

SRC = str(Path(__file__).resolve().parents[2] / "src")

ENDLESS = """HloModule endless

cond {
  p = s32[] parameter(0)
  zero = s32[] constant(0)
  ROOT ge = pred[] compare(p, zero), direction=GE
}

body {
  p = s32[] parameter(0)
  one = s32[] constant(1)
  a = s32[] add(p, one)
  mask = s32[] constant(1073741823)
  ROOT r = s32[] and(a, mask)
}

ENTRY main {
  x = s32[] parameter(0)
  ROOT w = s32[] while(x), condition=cond, body=body
}
"""

# counts i up to n (i != n): n = -1 runs 2^32 iterations, n = 10 ten
COUNT_TO = """HloModule count_to

cond {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  ROOT ne = pred[] compare(i, n), direction=NE
}

body {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], s32[]) tuple(j, n)
}

ENTRY main {
  i = s32[] parameter(0)
  n = s32[] parameter(1)
  t = (s32[], s32[]) tuple(i, n)
  w = (s32[], s32[]) while(t), condition=cond, body=body
  ROOT r = s32[] get-tuple-element(w), index=0
}
"""


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The children's environment, with their programs in the cache. And their SIGINT as a
    terminal's foreground process has it: a shell starts a background job (`pytest &`) with
    SIGINT ignored, which a child inherits across exec (and then keeps ignoring, as hlofuse
    must); a handled signal is reset to its default there instead."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(cache))
    for text in (ENDLESS, COUNT_TO):  # warm: the child loads, it does not compile
        hlofuse.compile(text, pipeline=None)
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield {**os.environ, "HLOFUSE_CACHE_DIR": str(cache), "PYTHONPATH": SRC}
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_after(proc: subprocess.Popen[str], seconds: float) -> None:
    """SIGINT to `proc` (in an endless loop) after `seconds`; it must end by itself (a loop
    that ignored the signal would never end: the wait's timeout fails the test)."""
    time.sleep(seconds)
    assert proc.poll() is None, proc.communicate()  # still in the endless loop
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    finally:
        proc.kill()


def test_sigint_stops_hlofuse_run_with_exit_130(env: dict[str, str], tmp_path: Path) -> None:
    hlo = tmp_path / "endless.hlo"
    hlo.write_text(ENDLESS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hlofuse.cli", "run", str(hlo), "--random-inputs", "0",
         "--pipeline", ""],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _interrupt_after(proc, 2.5)
    out, err = proc.communicate()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err


CALLER = """
import os, signal, sys, threading, time
import numpy as np
import hlofuse
exe = hlofuse.compile(sys.argv[1], pipeline=None)
i, n = np.int32(0), np.int32(-1)
if sys.argv[2] == "custom":
    seen = []
    signal.signal(signal.SIGINT, lambda *a: seen.append(time.monotonic()))
    n = np.int32(1_500_000_000)
sent = []
def send():
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Timer(0.3 if sys.argv[2] == "custom" else 0.5, send).start()
try:
    out = exe(i, n)[0]  # n = -1: endless unless stopped
except KeyboardInterrupt:
    print("interrupted")
    print("again", int(exe(np.int32(0), np.int32(10))[0]))
else:
    done = time.monotonic()
    # the order of events, not a duration: the SIGINT was sent while native code ran, and the
    # run went on to the end
    print("finished", int(out), "handler ran", len(seen), "signal during the run",
          bool(sent) and sent[0] < done)
"""


def test_keyboard_interrupt_reaches_the_python_caller(env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-c", CALLER, COUNT_TO, "default"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "interrupted", proc.stdout  # the loop is endless: only SIGINT ends it
    assert lines[1] == "again 10"  # the executable still works


def test_a_custom_sigint_handler_keeps_its_behaviour(env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-c", CALLER, COUNT_TO, "custom"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "finished 1500000000 handler ran 1 signal during the run True", \
        proc.stdout


def test_runs_are_not_slowed_by_the_poll(env: dict[str, str]) -> None:
    """The poll is one relaxed load per iteration: a loop of ten runs and returns normally, and
    the SIGINT counter is armed in this process."""
    exe = hlofuse.compile(COUNT_TO, pipeline=None)
    assert int(exe(np.int32(0), np.int32(10))[0]) == 10
    assert "hf_stop0) return 2;" in exe.source

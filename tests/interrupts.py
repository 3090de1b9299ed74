"""Running a script in a child process for tests of what must never crash or hang (an
interrupt, a fork), and the harness that interrupts a call from inside the child."""

import os
import subprocess
import sys
import textwrap

import pytest


def run_script(tmp_path, source: str, timeout: float = 300, env=None) -> str:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    try:
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
            env={**os.environ, **(env or {})},
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the script hung (killed after {timeout} s): {exc.stdout!r}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


# The child interrupts itself with SIGINT at fractions of one call's measured duration,
# then checks that it is alive and that fresh memory is not written by a launch that
# outlived the interrupted call.
INTERRUPT = """
import os, signal, threading, time
import numpy as np

# Python's own Ctrl-C handler, which a process started as a shell's background job (CI
# runners often are) does not get: it inherits SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

def interrupt_during(call, fraction, duration, want=None, fired=None):
    # call, with SIGINT sent `fraction` of `duration` in (or by whoever sets `fired`); how
    # the call ended (a result that the call returns must be right: never uninitialised
    # memory)
    timed = fired is None
    fired = fired or threading.Event()

    def fire():
        os.kill(os.getpid(), signal.SIGINT)
        fired.set()

    outcome = "late"
    try:
        try:
            if timed:
                threading.Timer(fraction * duration, fire).start()
            result = call()
            if want is not None:
                np.testing.assert_allclose(np.asarray(result), want, rtol=1e-5, atol=1e-5)
            outcome = "finished"
        except KeyboardInterrupt:
            outcome = "interrupted"
        except Exception as exc:  # JAX turns the interrupt inside a jitted call into an error
            assert "KeyboardInterrupt" in repr(exc), repr(exc)
            outcome = "interrupted (error)"
        while timed and not fired.wait(0.01):  # a signal sent after the call lands here
            pass
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    return outcome


def interrupt_by_a_worker(call, want=None):
    # SIGINT sent by the first launch that runs on a pool thread, so that it lands while
    # the call is surely in flight, however the machine's timing goes ("finished" where no
    # Python launches on a pool thread: the native JAX handler)
    from xform import _launch

    real, fired = _launch.steps.run_launch, threading.Event()

    def execute(launch, stream):
        if threading.current_thread() is not threading.main_thread() and not fired.is_set():
            fired.set()
            os.kill(os.getpid(), signal.SIGINT)
        real(launch, stream)

    _launch.steps.run_launch = execute
    try:
        return interrupt_during(call, None, 0.0, want, fired)
    finally:
        _launch.steps.run_launch = real


# Every launch the Python path runs is counted while it runs. Once a NumPy or PyTorch
# call has returned (or raised), none may still run: it would write into memory freed and
# reused. An interrupted JAX call leaves XLA's computation running on XLA's threads, in
# XLA's own buffers: its launches are waited for, then fresh memory must be untouched.
from xform import _launch as _counted_launch

_running = [0]
_running_changed = threading.Condition()
_execute_uncounted = _counted_launch.steps.run_launch


def _execute_counted(launch, stream):
    with _running_changed:
        _running[0] += 1
    try:
        _execute_uncounted(launch, stream)
    finally:
        with _running_changed:
            _running[0] -= 1
            _running_changed.notify_all()


_counted_launch.steps.run_launch = _execute_counted
OUTCOMES = {"finished", "interrupted", "interrupted (error)", "late"}


def memory_is_intact(size, xla=False):
    if xla:
        with _running_changed:
            assert _running_changed.wait_for(lambda: _running[0] == 0, timeout=60)
    assert _running[0] == 0, f"{_running[0]} launch(es) still running after the call returned"
    sentinel = np.full(size, 7.0)
    assert np.all(sentinel == 7.0), "memory written after the call returned"

def timed(call):
    # the fastest of three: a first, cold call (page faults, compiles) can take several
    # times as long, and interrupts timed from it would all land after the call
    durations = []
    for _ in range(3):
        start = time.perf_counter()
        call()
        durations.append(time.perf_counter() - start)
    return min(durations)
"""

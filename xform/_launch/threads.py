"""The CPU threads a large launch splits over: how many this process may use, and the
pool that runs the tiles (Warp's CPU launches are serial but release the GIL)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


def available_cpus(cgroup: str = "/sys/fs/cgroup") -> int:
    """The CPUs this process may run on: its affinity mask, and a cgroup's CPU quota
    (a container's limit) where one is set; os.cpu_count() counts the machine's."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        count = os.cpu_count() or 1
    quota = _cgroup_cpus(cgroup)
    return max(1, count if quota is None else min(count, quota))


def _cgroup_cpus(root: str) -> int | None:
    """The CPUs a cgroup's quota allows, rounded up (v2's cpu.max, v1's cfs files); None
    where there is no quota or no cgroup file to read."""

    def read(name: str) -> str | None:
        try:
            with open(os.path.join(root, name)) as file:
                return file.read().strip()
        except OSError:
            return None

    v2 = read("cpu.max")
    fields = (
        v2.split()
        if v2 is not None
        else [read("cpu/cpu.cfs_quota_us"), read("cpu/cpu.cfs_period_us")]
    )
    try:
        quota, period = int(fields[0]), int(fields[1])
    except (TypeError, ValueError, IndexError):  # "max": no limit
        return None
    return -(-quota // period) if quota > 0 and period > 0 else None


THREADS = available_cpus()

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="xform")
    return _pool


def _after_fork_in_child() -> None:
    """A forked child inherits the pool object but none of its threads (it would wait on
    them forever), and maybe a lock that a thread of the parent held: start afresh."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def run_all(tasks) -> None:
    """Run the callables `tasks`, the first on this thread and the rest on the pool (one
    hand-off fewer), and wait for every one, through Ctrl-C too: no launch may outlive
    the memory it writes, which the caller frees as soon as an exception reaches it.
    Then raise the first exception, a KeyboardInterrupt included."""
    pending, raised = [], None
    try:
        for task in tasks[1:]:
            pending.append(pool().submit(task))
        tasks[0]()
    except BaseException as exc:  # re-raised once every task submitted is done
        raised = exc
    for future in pending:
        while True:
            try:
                future.result()
                break
            except BaseException as exc:  # an interrupt while waiting, or the task's own
                raised = raised or exc
                if future.done():
                    break
    if raised is not None:
        raise raised

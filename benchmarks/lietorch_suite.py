"""LieTorch's own test suite (`lietorch/run_tests.py` with its `gradcheck.py`) run against
an implementation of LieTorch's API, through a shim: `run_tests.py` does `import lietorch`,
which the shim answers with the module under test.

    python -m benchmarks.lietorch_suite            # against xform.lietorch
    python -m benchmarks.lietorch_suite --peer     # against LieTorch's own CPU build

It runs what `run_tests.py`'s main block runs on the CPU (its forward and backward tests for
SO3, RxSO3, SE3 and Sim3, in float64, with its tolerances: 1e-3 for Sim3's Jacobian tests,
1e-8 otherwise), one test at a time, and prints each result and the counts. Its CUDA half
runs on CUDA devices only (`--device cuda`). LieTorch is read from `$XFORM_LIETORCH` or
`peers/lietorch` (see `benchmarks/lietorch_peer.py`); nothing of it is committed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import traceback

from . import lietorch_peer

FORWARD = ("test_exp_log", "test_inv", "test_adj", "test_act")
BACKWARD = (
    "test_exp_log_grad",
    "test_inv_log_grad",
    "test_adj_grad",
    "test_adjT_grad",
    "test_act_grad",
    "test_matrix_grad",
    "extract_translation_grad",
    "test_vec_grad",
    "test_fromvec_grad",
)
GROUPS = ("SO3", "RxSO3", "SE3", "Sim3")
# run_tests.py passes tol to these two only (1e-3 for Sim3, whose LieTorch Jacobian is a
# truncated series; 1e-8 for the others)
WITH_TOLERANCE = ("test_exp_log_grad", "test_inv_log_grad")


def cases() -> list[tuple[str, str]]:
    """(group, test) in run_tests.py's order."""
    return [(g, t) for g in GROUPS for t in FORWARD] + [(g, t) for g in GROUPS for t in BACKWARD]


@contextlib.contextmanager
def as_lietorch(module):
    """`import lietorch` gives `module`, and `gradcheck` is importable, while inside."""
    source = lietorch_peer.location() / "lietorch"
    saved = {name: sys.modules.get(name) for name in ("lietorch", "gradcheck")}
    sys.modules["lietorch"] = module
    sys.path.insert(0, str(source))
    try:
        yield source
    finally:
        sys.path.remove(str(source))
        for name, value in saved.items():
            if value is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = value


def load_suite(module):
    """run_tests.py as a module whose `lietorch` is `module`."""
    with as_lietorch(module) as source:
        spec = importlib.util.spec_from_file_location("lietorch_run_tests", source / "run_tests.py")
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)
    return suite


def run_case(suite, group: str, test: str, device: str = "cpu") -> tuple[bool, str]:
    """One test of the suite: (passed, what it printed or raised)."""
    cls = getattr(suite, group)
    kwargs = {"device": device}
    if test in WITH_TOLERANCE:
        kwargs["tol"] = 1e-3 if group == "Sim3" else 1e-8
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            getattr(suite, test)(cls, **kwargs)
    except Exception:  # noqa: BLE001 - a failing test is reported, not raised
        return False, printed.getvalue() + traceback.format_exc(limit=2)
    # test_inv_log_grad prints its Jacobians where they differ, and asserts nothing: a
    # printed tensor is a failure
    output = printed.getvalue()
    return "tensor(" not in output, output


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer", action="store_true", help="run LieTorch's own CPU build")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    if args.peer:
        module = lietorch_peer.load()
        if module is None:
            print(lietorch_peer.REASON)
            return 1
    else:
        import xform.lietorch as module
    suite = load_suite(module)
    torch.manual_seed(args.seed)
    passed = 0
    for group, test in cases():
        ok, output = run_case(suite, group, test, args.device)
        passed += ok
        note = "" if ok else "  " + output.strip().splitlines()[-1]
        print(f"{'PASS' if ok else 'FAIL'} {group:6s} {test}{note}")
    name = "LieTorch (its CPU build)" if args.peer else "xform.lietorch"
    print(f"{name}: {passed} of {len(cases())} passed ({args.device}, float64)")
    return 0 if passed == len(cases()) else 1


if __name__ == "__main__":
    sys.exit(main())

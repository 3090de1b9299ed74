"""Dynamics against Pinocchio on every robot of example-robot-data that has inertias,
fixed and floating base: inverse dynamics, the mass matrix, forward dynamics (and
FD(ID(a)) = a), bias forces, gravity torques and the explicit partials, at a random state
and at the joints' zero (axes aligned: near singular), float64.

Each robot's shapes compile their own kernels (some 5 s for each of the dynamics ops of a
chain and base, cold; milliseconds from Warp's cache). So a run takes Panda and Talos (an
arm, a humanoid with a floating base) and one robot in twenty of the other 63, drawn
from the test seed (they rotate from run to run, as the op tables do, tests/conftest.py);
XFORM_TESTS=full takes every one.

URDFs whose inertias no body can have (the triangle inequality broken, not positive
semi-definite) make every dynamics call raise, naming the link: that is checked, and the
maths is still compared with Pinocchio on them through a chain made without the check.
"""

from __future__ import annotations

import dataclasses
import os
import time
import zlib

import numpy as np
import pytest
from dynamics_reference import PinocchioReference, random_state, relative, robots_dir

from xform.kinematics import Chain

ROBOTS = robots_dir()
ALWAYS = {"panda_description/urdf/panda.urdf", "talos_data/robots/talos_reduced.urdf"}
# URDFs that are not robots with inertias a chain can take, and why.
NOT_CHAINS = {
    "alex_description/urdf/alex_psyonic_hands.urdf": "a mimic joint names a joint it lacks",
    "hector_description/robots/quadrotor_base.urdf": "no movable joint",
    "iris_description/robots/iris_simple.urdf": "no movable joint",
    "ur_description/urdf/ur3.urdf": "no link (an include stub)",
}
SEED = int(os.environ.get("XFORM_TEST_SEED", "0"))
FULL = os.environ.get("XFORM_TESTS", "sampled").strip().lower() == "full"


def urdfs() -> list[str]:
    if ROBOTS is None:
        return []
    found = sorted(str(p.relative_to(ROBOTS)) for p in ROBOTS.glob("*/*/*.urdf"))
    return [
        name
        for name in found
        if name not in NOT_CHAINS and "<inertial" in (ROBOTS / name).read_text()
    ]


def taken(name: str) -> bool:
    return FULL or name in ALWAYS or zlib.crc32(repr((SEED, name)).encode()) % 20 == 0


CASES = [
    pytest.param(name, floating, id=f"{name.split('/')[-1]}-{'floating' if floating else 'fixed'}")
    for name in urdfs()
    if taken(name)
    for floating in (False, True)
]


def unchecked(chain: Chain) -> Chain:
    """The chain without its inertias' check (the maths on data no body could have)."""
    return Chain(chain.model, dataclasses.replace(chain.dynamics, problems=()))


@pytest.mark.parametrize(("name", "floating"), CASES)
def test_robot_matches_pinocchio(name, floating, rng):
    path = ROBOTS / name
    chain = Chain.from_urdf(path, floating_base=floating)
    reference = PinocchioReference(chain, path)
    q, v, a = random_state(chain, rng, (2,))
    q[1, 7 * floating :] = 0.0
    if chain.dynamics.problems:
        with pytest.raises(ValueError, match="link '"):
            chain.inverse_dynamics(q, v, a)
        chain = unchecked(chain)
    started = time.perf_counter()
    tau = chain.inverse_dynamics(q, v, a)
    masses = chain.mass_matrix(q)
    bias = chain.bias_forces(q, v)
    gravity = chain.gravity_torques(q)
    errors = {}
    zero = np.zeros(chain.nv)
    for b in range(2):
        errors["tau"] = max(
            errors.get("tau", 0), relative(tau[b], reference.inverse_dynamics(q[b], v[b], a[b]))
        )
        errors["M"] = max(errors.get("M", 0), relative(masses[b], reference.mass_matrix(q[b])))
        errors["bias"] = max(
            errors.get("bias", 0), relative(bias[b], reference.inverse_dynamics(q[b], v[b], zero))
        )
        errors["g"] = max(
            errors.get("g", 0), relative(gravity[b], reference.inverse_dynamics(q[b], zero, zero))
        )
    by_q, by_v, m = chain.inverse_dynamics_derivatives(q[0], v[0], a[0])
    want = reference.inverse_dynamics_derivatives(q[0], v[0], a[0])
    errors["dtau"] = max(relative(got, w) for got, w in zip((by_q, by_v, m), want))
    if chain.dynamics.massless:
        with pytest.raises(ValueError, match="moves .*no <inertial>|carries no mass"):
            chain.forward_dynamics(q, v, tau)
    else:
        accelerations = chain.forward_dynamics(q, v, tau)
        # FD(ID(a)) = a loses what M's condition number takes, which at the joints' zero
        # can be infinite (iCub: a turn of neck_yaw with one of neck_roll moves no mass); the
        # equation of motion M FD + b = tau holds at every state
        conditions = np.linalg.cond(masses)
        errors["FD(ID(a))-a"] = max(
            relative(accelerations[b], a[b]) / (1e-14 * conditions[b] + 1e-10) for b in range(2)
        )
        errors["M FD + b - tau"] = relative(
            np.einsum("bij,bj->bi", masses, accelerations) + bias, tau
        )
        got = chain.forward_dynamics_derivatives(q[0], v[0], tau[0])
        if np.any(reference.G.sum(0) != 1) or np.any(reference.G.sum(1) != 1):
            want = reference.forward_dynamics_derivatives(q[0], v[0], tau[0])
        else:  # no mimic joint: Pinocchio's own ABA derivatives
            want = reference.aba_derivatives(q[0], v[0], tau[0])
        errors["da"] = max(relative(g, w) for g, w in zip(got, want))
    seconds = time.perf_counter() - started
    print(
        f"{name} {'floating' if floating else 'fixed'}: nv={chain.nv} bodies="
        f"{len(chain.dynamics.bodies)} compile+run {seconds:.1f} s; "
        + ", ".join(f"{k} {e:.1e}" for k, e in errors.items())
    )
    for key in ("tau", "M", "bias", "g"):
        assert errors[key] <= 1e-10, (key, errors)
    assert errors["dtau"] <= 1e-8, errors
    if "da" in errors:
        condition = np.linalg.cond(m)
        assert errors["FD(ID(a))-a"] <= 1.0, (conditions, errors)
        assert errors["M FD + b - tau"] <= 1e-12, errors
        assert errors["da"] <= 1e-8 * max(1.0, condition * 1e-6), (condition, errors)


def test_every_urdf_is_a_case_or_said_why():
    if ROBOTS is None:
        pytest.skip("example-robot-data is not installed")
    every = sorted(str(p.relative_to(ROBOTS)) for p in ROBOTS.glob("*/*/*.urdf"))
    assert len(urdfs()) + len(NOT_CHAINS) == len(every)
    for name in NOT_CHAINS:
        with pytest.raises((ValueError, TypeError)):
            Chain.from_urdf(ROBOTS / name).inverse_dynamics(np.zeros(1), np.zeros(1), np.zeros(1))

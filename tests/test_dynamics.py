"""Rigid-body dynamics of a kinematic tree: inverse dynamics, the mass matrix, forward
dynamics, bias forces, gravity torques and the explicit partials, fixed and floating base,
against Pinocchio (a small tree with every joint kind, mimic joints, fixed-joint links
merged, a link without inertia and external forces; the real robots are in
test_dynamics_robots.py); the closed-form derivatives against central differences, torch
(gradcheck, forward AD, torch.func, torch.compile) and JAX (check_grads, jit, vmap, jvp),
second order in both; float32; 0-d, broadcast and empty batches; bad input."""

from typing import Any

import numpy as np
import pytest
from dynamics_reference import PinocchioReference, quaternion_matrix, random_state, relative
from helpers import STEP, check_grads

import xform
from xform.kinematics import Chain

# Every joint kind, a continuous joint, mimics (multiplier and offset, a mimic of a mimic),
# a fixed joint's link with an inertia (merged into its parent), a moving link without
# <inertial> that carries mass, inertial frames with rpy, and links out of order.
# A link: (name, inertial origin xyz, rpy, mass, (ixx, ixy, ixz, iyy, iyz, izz)) or a name.
LINKS = [
    ("finger_b", "0 0.01 0.02", "0 0 0", 0.1, (2e-4, 0, 0, 1e-4, 0, 2e-4)),
    ("base", "0.02 -0.01 0.05", "0.1 0.2 0.3", 3.0, (0.05, 0.001, -0.002, 0.04, 0.003, 0.03)),
    ("upper", "0.2 0.01 -0.02", "-0.4 0.1 0.7", 1.5, (0.002, 1e-4, 2e-4, 0.02, -3e-4, 0.021)),
    "mount",
    ("wrist", "0.01 0.02 0.05", "0 0 0", 0.8, (0.003, 0, 1e-4, 0.002, 0, 0.0025)),
    ("camera", "0.03 0 0.01", "0 0.5 0", 0.2, (1e-4, 0, 0, 2e-4, 0, 2.5e-4)),
    ("finger_a", "0 0.01 0.02", "0 0 0", 0.1, (2e-4, 0, 0, 1e-4, 0, 2e-4)),
    ("tip", "0.01 0 0.03", "0 0 0", 0.05, (1e-5, 0, 0, 1e-5, 0, 1e-5)),
    ("side", "0 0.1 0", "0 0 0", 0.5, (0.001, 0, 0, 0.001, 0, 0.001)),
    ("slider", "0.05 0 0", "0 0 0", 0.7, (0.001, 0, 0, 0.002, 0, 0.002)),
]
# A joint: name, type, parent, child, origin xyz, rpy, axis, mimic (master, multiplier, offset).
JOINTS = [
    ("shoulder", "revolute", "base", "upper", "0 0 0.3", "0.1 -0.2 0.3", "0 0 1", None),
    ("elbow", "continuous", "upper", "mount", "0.4 0.05 0", "1.2 0.3 -0.7", "1 2 -0.5", None),
    ("twist", "revolute", "mount", "wrist", "0 0 0.05", "0 0.3 0", "0 0 1", None),
    ("camera_mount", "fixed", "wrist", "camera", "0.05 0 0.02", "0.3 0 0.2", None, None),
    ("finger_a_joint", "prismatic", "wrist", "finger_a", "0 0.02 0.1", "0 0 0", "0 1 0", None),
    ("finger_b_joint", "prismatic", "wrist", "finger_b", "0 -0.02 0.1", "0 0 3.14159", "0 1 0",
     ("finger_a_joint", -2.0, 0.01)),
    ("tip_joint", "revolute", "finger_b", "tip", "0 0 0.05", "0.5 0 0", "1 0 0",
     ("finger_b_joint", 3.0, -0.2)),
    ("side_joint", "fixed", "base", "side", "0.1 0.2 0.3", "0.3 0.2 0.1", None, None),
    ("slide", "prismatic", "side", "slider", "0 0 0.1", "0 1.0 0", "0.6 0 0.8", None),
]  # fmt: skip


def urdf(links, joints) -> str:
    """URDF text of the tables above (limits on every revolute and prismatic joint, which
    Pinocchio's parser requires)."""
    parts = ['<?xml version="1.0"?>\n<robot name="dynamic_tree">']
    for link in links:
        if isinstance(link, str):
            parts.append(f'<link name="{link}"/>')
            continue
        name, xyz, rpy, mass, (xx, xy, xz, yy, yz, zz) = link
        parts.append(
            f'<link name="{name}"><inertial><origin xyz="{xyz}" rpy="{rpy}"/>'
            f'<mass value="{mass}"/><inertia ixx="{xx}" ixy="{xy}" ixz="{xz}" iyy="{yy}" '
            f'iyz="{yz}" izz="{zz}"/></inertial></link>'
        )
    for name, kind, parent, child, xyz, rpy, axis, mimic in joints:
        body = f'<parent link="{parent}"/><child link="{child}"/><origin xyz="{xyz}" rpy="{rpy}"/>'
        if axis:
            body += f'<axis xyz="{axis}"/>'
        if kind in ("revolute", "prismatic"):
            body += '<limit lower="-3" upper="3" effort="10" velocity="1"/>'
        if mimic:
            body += f'<mimic joint="{mimic[0]}" multiplier="{mimic[1]}" offset="{mimic[2]}"/>'
        parts.append(f'<joint name="{name}" type="{kind}">{body}</joint>')
    return "\n".join([*parts, "</robot>"])


TREE = urdf(LINKS, JOINTS)
FUNCTIONS = ("inverse_dynamics", "mass_matrix", "forward_dynamics")
BASES = [pytest.param(False, id="fixed"), pytest.param(True, id="floating")]


@pytest.fixture(scope="module", params=[False, True], ids=["fixed", "floating"])
def tree(request):
    return Chain.from_urdf(TREE, floating_base=request.param, gravity=(0.3, -0.2, -9.81))


def inputs(chain, rng, batch=(3,)):
    q, v, a = random_state(chain, rng, batch)
    forces = rng.normal(size=(*batch, chain.n_links, 6))
    return q, v, a, forces


def test_model(tree):
    assert tree.joint_names == ("shoulder", "elbow", "twist", "finger_a_joint", "slide")
    assert tree.nv == tree.dof + 6 * tree.floating_base
    assert tree.nq == tree.dof + 7 * tree.floating_base
    assert tree.gravity == (0.3, -0.2, -9.81)
    # camera (fixed) merges into wrist, side (fixed) into the root
    assert tree.dynamics.body_links == (
        "base", "upper", "mount", "wrist", "finger_a", "finger_b", "tip", "slider"
    )  # fmt: skip
    assert Chain.from_urdf(TREE).gravity == (0.0, 0.0, -9.81)


def test_values_match_pinocchio(tree, rng):
    """Every function at random states (external forces included), against Pinocchio's
    model of the same URDF mapped through the mimic joints; and FD(ID(a)) = a."""
    reference = PinocchioReference(tree, TREE)
    q, v, a, forces = inputs(tree, rng)
    tau = tree.inverse_dynamics(q, v, a, forces)
    plain = tree.inverse_dynamics(q, v, a)
    masses = tree.mass_matrix(q)
    accelerations = tree.forward_dynamics(q, v, tau, forces)
    bias = tree.bias_forces(q, v)
    gravity = tree.gravity_torques(q)
    for b in range(len(q)):
        assert relative(tau[b], reference.inverse_dynamics(q[b], v[b], a[b], forces[b])) < 1e-12
        assert relative(plain[b], reference.inverse_dynamics(q[b], v[b], a[b])) < 1e-12
        assert relative(masses[b], reference.mass_matrix(q[b])) < 1e-12
        zero = np.zeros(tree.nv)
        assert relative(bias[b], reference.inverse_dynamics(q[b], v[b], zero)) < 1e-12
        assert relative(gravity[b], reference.inverse_dynamics(q[b], zero, zero)) < 1e-12
    np.testing.assert_allclose(accelerations, a, atol=1e-9)
    np.testing.assert_allclose(masses, np.swapaxes(masses, -1, -2), atol=0)


def test_partials_match_pinocchio(tree, rng):
    reference = PinocchioReference(tree, TREE)
    q, v, a, _ = inputs(tree, rng, (2,))
    tau = tree.inverse_dynamics(q, v, a)
    got_id = tree.inverse_dynamics_derivatives(q, v, a)
    got_fd = tree.forward_dynamics_derivatives(q, v, tau)
    for b in range(len(q)):
        want_id = reference.inverse_dynamics_derivatives(q[b], v[b], a[b])
        want_fd = reference.forward_dynamics_derivatives(q[b], v[b], tau[b])
        for got, want in zip(got_id, want_id):
            assert relative(got[b], want) < 1e-10
        for got, want in zip(got_fd, want_fd):
            assert relative(got[b], want) < 1e-9


def call(chain, name, args):
    """The public call of `name` on (q, v, third, forces)."""
    q, v, third, forces = args
    if name == "mass_matrix":
        return chain.mass_matrix(q)
    return getattr(chain, name)(q, v, third, forces)


def arguments(chain, name, args):
    q, v, third, forces = args
    return chain.dynamics_arguments(name, q, v, third, forces)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_vjp_and_jvp_match_central_differences(tree, name, rng):
    """The closed forms through xform.vjp / xform.jvp against central differences of the
    values, float64, in every differentiable operand (a floating base's quaternion
    included, off the unit sphere: q/|q| is what it rotates by)."""
    q, v, third, forces = inputs(tree, rng, (2,))
    if tree.floating_base:
        q[..., 3:7] *= 1.3
    if name == "forward_dynamics":
        third = tree.inverse_dynamics(q, v, third)
    op = tree.dynamics_op(name)
    args = arguments(tree, name, (q, v, third, forces))
    n = len(args) - (1 if name == "mass_matrix" else 2)
    result = op(*args)
    cotangent = rng.normal(size=result.shape)
    gradients = xform.vjp(op, args, cotangent)
    directions = [rng.normal(size=np.shape(x)) for x in args[:n]]
    tangent = xform.jvp(op, args, [*directions, *([None] * (len(args) - n))])

    def value(shifted):
        return op(*shifted, *args[n:])

    along = np.zeros_like(result)
    for k in range(n):
        expected = np.zeros_like(args[k])
        for index in np.ndindex(np.shape(args[k])):
            plus = [np.array(x) for x in args[:n]]
            minus = [np.array(x) for x in args[:n]]
            plus[k][index] += STEP
            minus[k][index] -= STEP
            expected[index] = (cotangent * (value(plus) - value(minus))).sum() / (2 * STEP)
        scale = max(1.0, np.abs(expected).max())
        np.testing.assert_allclose(gradients[k], expected, atol=1e-6 * scale)
    plus = [x + STEP * d for x, d in zip(args[:n], directions)]
    minus = [x - STEP * d for x, d in zip(args[:n], directions)]
    along = (value(plus) - value(minus)) / (2 * STEP)
    np.testing.assert_allclose(tangent, along, atol=1e-6 * max(1.0, np.abs(along).max()))


@pytest.mark.parametrize("name", ["inverse_dynamics_derivatives", "forward_dynamics_derivatives"])
def test_partials_are_the_derivatives(tree, name, rng):
    """dtau/dq (tangent space: a floating base's right perturbation), dtau/dv and M (and
    FD's) against central differences of the values."""
    q, v, a = random_state(tree, rng)
    forward = name.startswith("forward")
    third = tree.inverse_dynamics(q, v, a) if forward else a
    function = tree.forward_dynamics if forward else tree.inverse_dynamics
    by_q, by_v, last = getattr(tree, name)(q, v, third)
    for c in range(tree.nv):
        step = np.zeros(tree.nv)
        step[c] = STEP
        plus, minus = retract(tree, q, step), retract(tree, q, -step)
        column = (function(plus, v, third) - function(minus, v, third)) / (2 * STEP)
        np.testing.assert_allclose(by_q[:, c], column, atol=1e-6 * max(1, np.abs(column).max()))
        column = (function(q, v + step, third) - function(q, v - step, third)) / (2 * STEP)
        np.testing.assert_allclose(by_v[:, c], column, atol=1e-6 * max(1, np.abs(column).max()))
        column = (function(q, v, third + step) - function(q, v, third - step)) / (2 * STEP)
        np.testing.assert_allclose(last[:, c], column, atol=1e-6 * max(1, np.abs(column).max()))


def retract(chain, q, delta):
    """q moved by the tangent delta: the root by T exp(delta[:6]) (first order suffices
    for central differences: translation R rho, rotation q (1, omega/2) normalised)."""
    q = np.array(q, dtype=np.float64)
    if not chain.floating_base:
        return q + delta
    rotation = quaternion_matrix(q[3:7] / np.linalg.norm(q[3:7]))
    q[:3] += rotation @ delta[:3]
    angle = np.linalg.norm(delta[3:6])
    axis = delta[3:6] / angle if angle else delta[3:6]
    turn = np.array([np.cos(angle / 2), *(np.sin(angle / 2) * axis)])
    w1, x1, y1, z1 = q[3:7]
    w2, x2, y2, z2 = turn
    q[3:7] = [
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ]
    q[7:] += delta[6:]
    return q


def test_float32_within_its_rounding(tree, rng):
    q, v, a, forces = inputs(tree, rng)
    for name in FUNCTIONS + ("bias_forces", "gravity_torques"):
        args = (q, v, tree.inverse_dynamics(q, v, a) if name == "forward_dynamics" else a, forces)
        if name == "bias_forces":
            want, got = (
                tree.bias_forces(q, v),
                tree.bias_forces(q.astype(np.float32), v.astype(np.float32)),
            )
        elif name == "gravity_torques":
            want, got = tree.gravity_torques(q), tree.gravity_torques(q.astype(np.float32))
        else:
            want = call(tree, name, args)
            got = call(tree, name, [x.astype(np.float32) for x in args])
        assert got.dtype == np.float32
        bound = 1e-4 if name == "forward_dynamics" else 2e-5
        assert relative(got, want) < bound, name


def test_batches_0d_broadcast_empty(tree, rng):
    q, v, a, forces = inputs(tree, rng, (2, 3))
    tau = tree.inverse_dynamics(q, v, a, forces)
    assert tau.shape == (2, 3, tree.nv)
    np.testing.assert_array_equal(
        tree.inverse_dynamics(q[1, 2], v[1, 2], a[1, 2], forces[1, 2]), tau[1, 2]
    )
    assert tree.mass_matrix(q[0, 0]).shape == (tree.nv, tree.nv)
    # one q for many v and a; one force set for every configuration
    shared = tree.inverse_dynamics(q[0, :1], v[0], a[0], forces[0, 0])
    for b in range(3):
        np.testing.assert_allclose(
            shared[b], tree.inverse_dynamics(q[0, 0], v[0, b], a[0, b], forces[0, 0]), atol=1e-13
        )
    empty = np.zeros((0, tree.nq))
    assert tree.inverse_dynamics(empty, np.zeros((0, tree.nv)), np.zeros((0, tree.nv))).shape == (
        0,
        tree.nv,
    )
    assert tree.mass_matrix(empty).shape == (0, tree.nv, tree.nv)
    derivatives = tree.forward_dynamics_derivatives(q[0, 0], v[0, 0], tau[0, 0])
    assert [d.shape for d in derivatives] == [(tree.nv, tree.nv)] * 3
    strided = np.asfortranarray(q.reshape(6, tree.nq))[::2]
    np.testing.assert_array_equal(tree.mass_matrix(strided), tree.mass_matrix(strided.copy()))


# The same tree with every joint on a coordinate of its own: forward dynamics' value runs
# the articulated-body recursion there (a mimic joint keeps the factored mass matrix).
OWN_TREE = urdf(LINKS, [joint[:7] + (None,) for joint in JOINTS])


@pytest.mark.parametrize("floating", BASES)
def test_articulated_body_matches_pinocchio(floating, rng):
    """Forward dynamics without mimic joints: Pinocchio's ABA at random states, its
    equation of motion with external forces, FD(ID(a)) = a at near singular joints,
    float32 within its rounding, and batches (0-d, broadcast, empty, strided)."""
    chain = Chain.from_urdf(OWN_TREE, floating_base=floating, gravity=(0.3, -0.2, -9.81))
    assert chain.dof == 7 and chain.nv == len(chain.dynamics.bodies) - 1 + 6 * floating
    reference = PinocchioReference(chain, OWN_TREE)
    pin = reference.pin
    q, v, a, forces = inputs(chain, rng, (4,))
    tau = rng.normal(size=(4, chain.nv))
    accelerations = chain.forward_dynamics(q, v, tau)
    with_forces = chain.forward_dynamics(q, v, tau, forces)
    for b in range(len(q)):
        aba = pin.aba(reference.model, reference.data, reference.q(q[b]), v[b], tau[b])
        assert relative(accelerations[b], aba) < 1e-11
        want = reference.forward_dynamics(q[b], v[b], tau[b], forces[b])
        assert relative(with_forces[b], want) < 1e-10
    for joints in (np.zeros(chain.dof), np.full(chain.dof, np.pi), np.full(chain.dof, 1e-9)):
        root = [0.1, -0.2, 0.3, 0.0, 1.0, 0.0, 0.0] if floating else []
        at = np.concatenate([root, joints])
        torques = chain.inverse_dynamics(at, v[0], a[0], forces[0])
        back = chain.forward_dynamics(at, v[0], torques, forces[0])
        np.testing.assert_allclose(back, a[0], atol=1e-9)
    # float32 within its rounding: a backward-stable solve's forward error, eps cond(M)
    # (M's condition here reaches 2e5: the light tip; 120 draws reached 0.41 of it)
    q32, v32, tau32 = (x.astype(np.float32) for x in (q, v, chain.inverse_dynamics(q, v, a)))
    single = chain.forward_dynamics(q32, v32, tau32)
    rounding = np.finfo(np.float32).eps * np.linalg.cond(chain.mass_matrix(q)).max()
    assert single.dtype == np.float32 and relative(single, a) < rounding
    np.testing.assert_array_equal(chain.forward_dynamics(q[2], v[2], tau[2]), accelerations[2])
    shared = chain.forward_dynamics(q[:1], v, tau)  # one q for every v and tau
    np.testing.assert_allclose(shared[3], chain.forward_dynamics(q[0], v[3], tau[3]), atol=1e-13)
    empty = chain.forward_dynamics(np.zeros((0, chain.nq)), np.zeros((0, chain.nv)), tau[:0])
    assert empty.shape == (0, chain.nv)
    strided = np.asfortranarray(np.repeat(q, 2, axis=0))[::2]
    np.testing.assert_array_equal(chain.forward_dynamics(strided, v, tau), accelerations)


@pytest.mark.parametrize("floating", BASES)
def test_forward_dynamics_takes_each_way_where_it_should(floating, rng):
    """The articulated-body recursion and the factored mass matrix as ops of their own, on
    the chain's arguments: ABA where the joints own their coordinates (equal to the
    factored solve there), the factor where a mimic joint couples branches; and the choice
    `forward_dynamics` makes between them (`joints_own_coordinates`)."""
    import warp as wp

    from xform._op import Operand
    from xform.kinematics import _articulated, _dynamics, _inertia, _tree_factor

    @wp.func
    def owns(q: Any, v: Any, bodies: Any):
        return wp.where(
            _tree_factor.joints_own_coordinates(q, v, bodies), type(q[0])(1.0), type(q[0])(0.0)
        )

    for text, own in ((OWN_TREE, True), (TREE, False)):
        chain = Chain.from_urdf(text, floating_base=floating)
        nq, nv, links = chain.nq, chain.nv, chain.n_links
        bodies = Operand((len(chain.dynamics.bodies), _inertia.BODY_COLUMNS), batch=())
        frames = Operand((links, _inertia.FRAME_COLUMNS), batch=())
        operands = {"q": (nq,), "v": (nv,), "tau": (nv,), "forces": (links, 6),
                    "bodies": bodies, "frames": frames}  # fmt: skip
        name = f"test_fd_{'own' if own else 'mimic'}_{int(floating)}"
        ways = {
            way: xform.define_op(f"{name}_{way}", function, operands, {"a": (nv,)},
                                 differentiable=(), max_unroll=1)  # fmt: skip
            for way, function in (("aba", _articulated.articulated_body),
                                  ("factor", _dynamics.factored_forward_dynamics))  # fmt: skip
        }
        chooses = xform.define_op(f"{name}_owns", owns, {"q": (nq,), "v": (nv,), "bodies": bodies},
                                  {"own": ()}, differentiable=())  # fmt: skip
        q, v, _, forces = inputs(chain, rng)
        tau = rng.normal(size=(3, nv))
        arguments = chain.dynamics_arguments("forward_dynamics", q, v, tau, forces)
        chosen = chain.forward_dynamics(q, v, tau, forces)
        want = PinocchioReference(chain, text)
        for b in range(3):
            assert relative(chosen[b], want.forward_dynamics(q[b], v[b], tau[b], forces[b])) < 1e-10
        np.testing.assert_array_equal(chooses(q, v, arguments[4]), float(own))
        np.testing.assert_array_equal(chosen, ways["aba" if own else "factor"](*arguments))
        if own:
            np.testing.assert_allclose(ways["aba"](*arguments), ways["factor"](*arguments),
                                       rtol=1e-10, atol=1e-10)  # fmt: skip


def test_external_forces_act_as_wrenches(rng):
    """A force on a link is -J^T f in the torques (J the link's Jacobian in its own
    frame); on a fixed base's root it moves nothing."""
    chain = Chain.from_urdf(TREE)
    q, v, a, _ = inputs(chain, rng, ())
    forces = np.zeros((chain.n_links, 6))
    root = chain.link_names.index("base")
    forces[root] = rng.normal(size=6)
    np.testing.assert_allclose(
        chain.inverse_dynamics(q, v, a, forces), chain.inverse_dynamics(q, v, a), atol=1e-14
    )
    link = chain.link_names.index("camera")  # merged into wrist by a fixed joint
    forces[link] = rng.normal(size=6)
    poses = chain.forward_kinematics(q)
    rotation = quaternion_matrix(poses.quaternion[link])
    jacobian = chain.jacobian(q, "camera")  # base frame, at the link's origin
    force_in_base = np.concatenate([rotation @ forces[link, :3], rotation @ forces[link, 3:]])
    expected = chain.inverse_dynamics(q, v, a) - jacobian.T @ force_in_base
    np.testing.assert_allclose(chain.inverse_dynamics(q, v, a, forces), expected, atol=1e-12)


def test_near_singular_configurations(rng):
    """Joints at zero (axes aligned), at pi, and a floating base upside down: still
    Pinocchio's values, and FD inverts ID."""
    for floating in (False, True):
        chain = Chain.from_urdf(TREE, floating_base=floating)
        reference = PinocchioReference(chain, TREE)
        _, v, a = random_state(chain, rng)
        for joints in (np.zeros(chain.dof), np.full(chain.dof, np.pi), np.full(chain.dof, 1e-9)):
            q = (
                np.concatenate([[0.1, -0.2, 0.3, 0.0, 1.0, 0.0, 0.0], joints])
                if floating
                else joints
            )
            tau = chain.inverse_dynamics(q, v, a)
            assert relative(tau, reference.inverse_dynamics(q, v, a)) < 1e-12
            assert relative(chain.mass_matrix(q), reference.mass_matrix(q)) < 1e-12
            np.testing.assert_allclose(chain.forward_dynamics(q, v, tau), a, atol=1e-9)


# --- frameworks ------------------------------------------------------------------------------


def test_torch_autograd_gradcheck_func_and_compile(tree, rng):
    torch = pytest.importorskip("torch")
    q, v, a, forces = (torch.tensor(x, requires_grad=True) for x in inputs(tree, rng, (2,)))
    assert torch.autograd.gradcheck(
        lambda q, v, a, f: tree.inverse_dynamics(q, v, a, f),
        (q, v, a, forces),
        check_forward_ad=True,
    )
    assert torch.autograd.gradcheck(lambda q: tree.mass_matrix(q), (q,), check_forward_ad=True)
    tau = tree.inverse_dynamics(q, v, a).detach().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, v, t, f: tree.forward_dynamics(q, v, t, f),
        (q, v, tau, forces),
        check_forward_ad=True,
    )

    # torch.func: grad of a loss, vmapped
    def loss(q, v, a):
        return (tree.inverse_dynamics(q, v, a) ** 2).sum() + tree.mass_matrix(q).trace()

    grads = torch.func.vmap(torch.func.grad(loss))(q.detach(), v.detach(), a.detach())
    for b in range(2):
        want = torch.func.grad(loss)(q.detach()[b], v.detach()[b], a.detach()[b])
        np.testing.assert_allclose(grads[b].numpy(), want.numpy(), atol=1e-10)
    compiled = torch.compile(lambda q, v, t: tree.forward_dynamics(q, v, t), fullgraph=True)
    np.testing.assert_allclose(
        compiled(q.detach(), v.detach(), tau.detach()).numpy(), a.detach().numpy(), atol=1e-9
    )


def test_jax_jit_grad_jvp_vmap(tree, rng):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    q, v, a, forces = (jnp.asarray(x) for x in inputs(tree, rng, (2,)))
    check_grads(lambda q, v, a, f: tree.inverse_dynamics(q, v, a, f), (q, v, a, forces))
    check_grads(tree.mass_matrix, (q,))
    tau = tree.inverse_dynamics(q, v, a)
    check_grads(lambda q, v, t: tree.forward_dynamics(q, v, t), (q, v, tau))

    def loss(q, v, t):
        return (tree.forward_dynamics(q, v, t) ** 2).sum()

    grads = jax.jit(jax.vmap(jax.grad(loss)))(q, v, tau)
    for b in range(2):
        np.testing.assert_allclose(grads[b], jax.grad(loss)(q[b], v[b], tau[b]), atol=1e-10)
    jitted = jax.jit(tree.forward_dynamics)(q, v, tau)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(a), atol=1e-9)
    assert tree.gravity_torques(q.astype(jnp.float32)).dtype == jnp.float32


# Second derivatives differentiate the closed forms with Warp's adjoint, whose kernels
# unroll every sweep over the tree: minutes of compilation each on two cores. So the
# tables here take the fixed base for every function in PyTorch, and one function per
# mode in JAX; the floating base's root terms are in the first derivatives' closed forms,
# which these differentiate the same way.


@pytest.mark.parametrize("name", FUNCTIONS)
def test_torch_second_derivatives(name, rng):
    """gradgradcheck (double backward: the VJP's VJP) of each function, fixed base."""
    torch = pytest.importorskip("torch")
    chain = Chain.from_urdf(TREE)
    q, v, a, _ = (torch.tensor(x, requires_grad=True) for x in inputs(chain, rng, (1,)))
    if name == "mass_matrix":
        assert torch.autograd.gradgradcheck(chain.mass_matrix, (q,))
    elif name == "inverse_dynamics":
        assert torch.autograd.gradgradcheck(
            lambda q, v, a: chain.inverse_dynamics(q, v, a), (q, v, a)
        )
    else:
        tau = chain.inverse_dynamics(q, v, a).detach().requires_grad_(True)
        assert torch.autograd.gradgradcheck(
            lambda q, v, t: chain.forward_dynamics(q, v, t), (q, v, tau)
        )


def test_jax_hessian_of_inverse_dynamics(rng):
    """jax.hessian (forward over reverse: the VJP's tangent) of a loss of the torques, under
    jit and vmap, against central differences of its gradient."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    from helpers import hessian_by_differences

    chain = Chain.from_urdf(TREE)
    q, v, a, _ = inputs(chain, rng, (2,))

    def loss(q, v, a):
        return (chain.inverse_dynamics(q, v, a) ** 2).sum()

    hessians = jax.jit(jax.vmap(jax.hessian(loss)))(q, v, a)
    gradient = jax.grad(loss)
    for b in range(2):
        want = hessian_by_differences(lambda x, b=b: np.asarray(gradient(x, v[b], a[b])), q[b])
        np.testing.assert_allclose(hessians[b], want, atol=1e-5 * max(1, np.abs(want).max()))


@pytest.mark.parametrize("name", ["inverse_dynamics_derivatives", "forward_dynamics_derivatives"])
def test_differentiating_the_partials_raises_naming_them(name, rng):
    """The explicit partials have no derivatives (they would be second derivatives of the
    dynamics): differentiating them raises HigherDerivativeError naming the function, in
    PyTorch (backward, forward mode), JAX (grad, jvp) and xform.vjp / xform.jvp, never a
    silent zero; called on constants (detached inputs) they serve as values."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    chain = Chain.from_urdf(TREE)
    function = getattr(chain, name)
    q, v, a, _ = inputs(chain, rng, (2,))
    third = chain.inverse_dynamics(q, v, a) if name.startswith("forward") else a
    message = f"Chain.{name} is not differentiable"
    x = torch.tensor(q, requires_grad=True)
    results = function(x, torch.tensor(v), torch.tensor(third))
    assert all(r.requires_grad for r in results)
    with pytest.raises(xform.HigherDerivativeError, match=message):
        results[0].sum().backward()
    with pytest.raises(xform.HigherDerivativeError, match=message):
        torch.func.jvp(lambda x: function(x, v, third)[0], (x.detach(),), (x.detach(),))
    jq = jax.numpy.asarray(q)
    with pytest.raises(xform.HigherDerivativeError, match=message):
        jax.grad(lambda x: function(x, v, third)[1].sum())(jq)
    with pytest.raises(xform.HigherDerivativeError, match=message):
        jax.jvp(lambda x: function(x, v, third)[0], (jq,), (jq,))
    op = chain.dynamics_op(name)
    args = chain.dynamics_arguments(name, q, v, third)
    with pytest.raises(xform.HigherDerivativeError, match=message):
        xform.vjp(op, args, tuple(np.ones((2, chain.nv, chain.nv)) for _ in range(3)))
    with pytest.raises(xform.HigherDerivativeError, match=message):
        xform.jvp(op, args, [q, None, None, None])
    detached = [r.detach().numpy() for r in function(x.detach(), v, third)]
    for got, want in zip(detached, function(q, v, third)):
        np.testing.assert_array_equal(got, want)
    held = jax.grad(lambda x: function(jax.lax.stop_gradient(x), v, third)[0].sum() + x.sum())(jq)
    np.testing.assert_array_equal(np.asarray(held), 1.0)


# --- bad input ---------------------------------------------------------------------------------


def with_inertial(xml: str, link: str, inertial: str) -> str:
    return xml.replace(f'<link name="{link}"/>', f'<link name="{link}">{inertial}</link>')


def inertial_xml(mass="1", **moments) -> str:
    """An <inertial>'s mass and inertia (a unit sphere's but for what is given)."""
    values = {"ixx": "1", "ixy": "0", "ixz": "0", "iyy": "1", "iyz": "0", "izz": "1"} | moments
    tensor = " ".join(f'{k}="{v}"' for k, v in values.items())
    return ("" if mass is None else f'<mass value="{mass}"/>') + f"<inertia {tensor}/>"


BAD_INERTIALS = {
    "negative mass": (inertial_xml(mass="-1"), "mass is -1"),
    "non-finite mass": (inertial_xml(mass="nan"), "mass is 'nan'"),
    "missing mass": (inertial_xml(mass=None), "mass is None"),
    "non-finite inertia": (inertial_xml(ixx="inf"), "ixx is 'inf'"),
    "indefinite": (inertial_xml(ixy="2"), "not positive semi-definite"),
    "triangle": (inertial_xml(izz="3"), "triangle inequality"),
}


@pytest.mark.parametrize("case", sorted(BAD_INERTIALS))
def test_bad_inertials_raise_at_dynamics_naming_the_link(case):
    inertial, message = BAD_INERTIALS[case]
    xml = with_inertial(TREE, "mount", f"<inertial>{inertial}</inertial>")
    chain = Chain.from_urdf(xml)  # kinematics does not read inertias
    q = np.zeros(chain.dof)
    assert chain.forward_kinematics(q).position.shape == (chain.n_links, 3)
    for call_it in (
        lambda: chain.inverse_dynamics(q, q, q),
        lambda: chain.mass_matrix(q),
        lambda: chain.forward_dynamics(q, q, q),
        lambda: chain.gravity_torques(q),
    ):
        with pytest.raises(ValueError, match=f"link 'mount'.*{message}"):
            call_it()


@pytest.mark.parametrize("case", ["indefinite", "triangle"])
def test_unphysical_inertias_taken_as_written_when_asked(case):
    """`check_inertias=False`: a rotational inertia no mass distribution has (as some
    published URDFs carry) is used as written, as Pinocchio uses it; the error says so;
    data that cannot be used (a negative or non-finite mass) still raises."""
    inertial, message = BAD_INERTIALS[case]
    xml = with_inertial(TREE, "mount", f"<inertial>{inertial}</inertial>")
    q = np.zeros(Chain.from_urdf(xml).dof)
    with pytest.raises(ValueError, match=rf"{message}.*check_inertias=False"):
        Chain.from_urdf(xml).mass_matrix(q)
    matrix = Chain.from_urdf(xml, check_inertias=False).mass_matrix(q)
    assert np.isfinite(matrix).all() and np.allclose(matrix, matrix.T)
    negative = with_inertial(TREE, "mount", f"<inertial>{inertial_xml(mass='-1')}</inertial>")
    with pytest.raises(ValueError, match="mass is -1"):
        Chain.from_urdf(negative, check_inertias=False).mass_matrix(q)
    with pytest.raises(TypeError, match="check_inertias must be True or False"):
        Chain.from_urdf(xml, check_inertias="no")


def test_massless_moving_subtree_is_an_error_for_forward_dynamics_only():
    xml = urdf([link if link[0] != "slider" else "slider" for link in LINKS], JOINTS)
    chain = Chain.from_urdf(xml)
    q = np.zeros(chain.dof)
    assert np.isfinite(chain.inverse_dynamics(q, q, q)).all()
    assert np.isfinite(chain.mass_matrix(q)).all()
    for function in (chain.forward_dynamics, chain.forward_dynamics_derivatives):
        with pytest.raises(
            ValueError, match="link 'slider' moves.*coordinate 'slide'.*no <inertial>"
        ):
            function(q, q, q)
    floating = Chain.from_urdf(
        "<robot name='r'><link name='a'/><link name='b'/><joint name='j' type='revolute'>"
        "<parent link='a'/><child link='b'/><axis xyz='0 0 1'/></joint></robot>",
        floating_base=True,
    )
    with pytest.raises(ValueError, match="floating base 'a' carries no mass"):
        floating.forward_dynamics(np.r_[0, 0, 0, 1, 0, 0, 0, 0.0], np.zeros(7), np.zeros(7))


def test_bad_calls_raise_naming_the_argument(tree):
    nq, nv = tree.nq, tree.nv
    q, v = np.zeros(nq), np.zeros(nv)
    with pytest.raises(ValueError, match=rf"q has shape \({nq + 1},\); expected \(\.\.\., {nq}\)"):
        tree.inverse_dynamics(np.zeros(nq + 1), v, v)
    with pytest.raises(ValueError, match=rf"v has shape \(2, {nv - 1}\)"):
        tree.inverse_dynamics(q, np.zeros((2, nv - 1)), v)
    with pytest.raises(ValueError, match=r"tau has shape \(3,\)"):
        tree.forward_dynamics(q, v, np.zeros(3))
    with pytest.raises(ValueError, match=r"external_forces has shape \(9, 3\)"):
        tree.inverse_dynamics(q, v, v, np.zeros((9, 3)))
    with pytest.raises(ValueError, match="q has shape"):
        tree.mass_matrix(np.zeros(()))
    with pytest.raises(TypeError, match="v is a builtins.list"):
        tree.inverse_dynamics(q, [0.0] * nv, v)
    with pytest.raises(TypeError, match="float32 or float64"):
        tree.mass_matrix(np.zeros(nq, dtype=np.int64))
    with pytest.raises(ValueError, match="gravity is"):
        Chain.from_urdf(TREE, gravity=(0, 0))
    with pytest.raises(ValueError, match="gravity is"):
        Chain.from_urdf(TREE, gravity=(0, 0, np.inf))
    with pytest.raises(TypeError, match="floating_base"):
        Chain.from_urdf(TREE, floating_base="yes")
    with pytest.raises(ValueError, match="unknown call"):
        tree.dynamics_op("aba")
    torch = pytest.importorskip("torch")
    # NumPy joins a framework's arrays; two frameworks do not mix
    tau = tree.inverse_dynamics(torch.zeros(nq, dtype=torch.float64), v, v)
    assert isinstance(tau, torch.Tensor)
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(TypeError, match="pass the arrays in one framework"):
        tree.inverse_dynamics(torch.zeros(nq, dtype=torch.float64), jnp.zeros(nv), v)


def test_malformed_tables_by_hand_stay_in_bounds(rng):
    chain = Chain.from_urdf(TREE)
    q, v, a, forces = inputs(chain, rng)
    op = chain.dynamics_op("inverse_dynamics")
    q, v, a, forces, bodies, frames = chain.dynamics_arguments("inverse_dynamics", q, v, a, forces)
    bodies, frames = np.array(bodies), np.array(frames)
    bodies[3, 0] = 9.0  # a parent after its child
    bodies[4, 2] = 99.0  # a coordinate past v
    frames[2, 0] = -5.0  # a body before the first
    frames[5, 0] = 1e9
    assert np.isfinite(op(q, v, a, forces, bodies, frames)).all()

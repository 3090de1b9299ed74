"""The g2o and BAL readers of xform.optim: every error names file:line, round trips are
exact; and the pose-graph command on what broke it (issue 38: badly scaled information,
ids beyond int64, files that are not UTF-8, a zero quaternion in a vertex), with fuzz
families of each."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from xform.optim.bal import BalProblem, read_bal, write_bal
from xform.optim.g2o import read_g2o

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "interop_examples"))

import pose_graph  # noqa: E402

UPPER_6 = " ".join("1" if r == c else "0" for r in range(6) for c in range(r, 6))


def vertex_3d(k, x=0.0, q="0 0 0 1"):
    return f"VERTEX_SE3:QUAT {k} {x} 0 0 {q}"


def edge_3d(i, j, x=1.0, information=UPPER_6):
    return f"EDGE_SE3:QUAT {i} {j} {x} 0 0 0 0 0 1 {information}"


def information_3d(diagonal):
    return " ".join(
        repr(float(diagonal[r])) if r == c else "0" for r in range(6) for c in range(r, 6)
    )


def information_2d(matrix):
    return " ".join(repr(float(matrix[r, c])) for r in range(3) for c in range(r, 3))


def write(tmp_path, lines, name="graph.g2o"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


# --- issue 38, item 2: badly scaled information -------------------------------------------


def run_command(path, init):
    return pose_graph.main([str(path), "--init", init])


@pytest.mark.parametrize("init", ["chordal", "odometry"])
def test_chain_with_information_1_and_1e16_solves(tmp_path, capsys, init):
    """A 3-pose SE(3) chain whose edges have I and 1e16 I: the chordal start crashed with
    an ArithmeticError (its normal equations lose the light edge: 1e16 + 1 - 1e16 = 0)."""
    lines = [
        vertex_3d(0), vertex_3d(1, 1.1), vertex_3d(2, 2.3),
        edge_3d(0, 1, 1.0, information_3d([1.0] * 6)),
        edge_3d(1, 2, 1.0, information_3d([1e16] * 6)),
    ]  # fmt: skip
    assert run_command(write(tmp_path, lines), init) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("final chi2=") and float(last.split()[1].split("=")[1]) < 1e-12


@pytest.mark.parametrize("init", ["chordal", "odometry"])
def test_se2_edge_with_a_subnormal_information_entry_solves(tmp_path, capsys, init):
    """An SE(2) edge with information diag(1, 1e-320, 1), positive definite, whose inverse
    overflows: the chordal weights were NaN."""
    information = np.diag([1.0, 1e-320, 1.0])
    lines = [
        "VERTEX_SE2 0 0 0 0", "VERTEX_SE2 1 1 0.1 0.2", "VERTEX_SE2 2 2 0.3 0.1",
        f"EDGE_SE2 0 1 1 0 0 {information_2d(information)}",
        f"EDGE_SE2 1 2 1 0 0 {information_2d(np.eye(3))}",
    ]  # fmt: skip
    assert run_command(write(tmp_path, lines), init) == 0
    assert "final chi2=" in capsys.readouterr().out


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_badly_scaled_information(tmp_path, capsys, seed):
    """Random chains with loop closures whose information matrices are scaled by 10^u, u
    uniform in [-300, 300] per edge (and per diagonal entry on some): the command solves,
    or refuses with a clear message; never an uncaught exception."""
    rng = np.random.default_rng([seed, 38])
    n = int(rng.integers(3, 9))
    lines = [vertex_3d(k, float(k) + rng.normal(0, 0.1)) for k in range(n)]
    pairs = [(k, k + 1) for k in range(n - 1)] + [
        tuple(rng.choice(n, 2, replace=False)) for _ in range(3)
    ]
    for i, j in pairs:
        scale = 10.0 ** rng.uniform(-300, 300, 6 if rng.random() < 0.3 else 1)
        lines.append(edge_3d(i, j, float(j - i), information_3d(np.broadcast_to(scale, 6))))
    path = write(tmp_path, lines)
    for init in ("chordal", "odometry"):
        code = run_command(path, init)
        captured = capsys.readouterr()
        assert code in (0, 1)
        if code:
            assert captured.err.startswith("error: ") and "Traceback" not in captured.err


# --- issue 38, items 7 and 8: ids beyond int64, files that are not UTF-8, zero quaternions ---


@pytest.mark.parametrize("bad_id", [2**63, -(2**63) - 1, 10**30])
def test_vertex_id_beyond_int64_names_file_and_line(tmp_path, capsys, bad_id):
    lines = [vertex_3d(0), vertex_3d(bad_id), edge_3d(0, 1)]
    path = write(tmp_path, lines)
    with pytest.raises(
        ValueError, match=f"{path}:2: .*vertex id {bad_id} is outside int64's range"
    ):
        read_g2o(path)
    assert pose_graph.main([str(path)]) == 1
    assert f"{path}:2" in capsys.readouterr().err


def test_ids_at_the_ends_of_int64_are_read(tmp_path):
    lines = [vertex_3d(-(2**63)), vertex_3d(2**63 - 1), edge_3d(-(2**63), 2**63 - 1)]
    graph = read_g2o(write(tmp_path, lines))
    assert graph.vertex_ids.tolist() == [-(2**63), 2**63 - 1]


@pytest.mark.parametrize("seed", range(8))
def test_fuzz_huge_ids(tmp_path, seed):
    """A random id of a random line replaced by a huge or negative one: read, or a
    ValueError naming that line."""
    rng = np.random.default_rng([seed, 7])
    lines = [vertex_3d(k) for k in range(4)] + [edge_3d(k, k + 1) for k in range(3)]
    number = int(rng.integers(len(lines)))
    fields = lines[number].split()
    position = 1 if number < 4 else int(rng.integers(1, 3))
    fields[position] = str(int(rng.choice([1, -1])) * int(10 ** rng.uniform(15, 40)))
    lines[number] = " ".join(fields)
    path = write(tmp_path, lines)
    try:
        read_g2o(path)
    except ValueError as error:
        assert f"{path}:{number + 1}: " in str(error)


def test_file_that_is_not_utf8_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "latin1.g2o"
    path.write_bytes(b"VERTEX_SE3:QUAT 0 0 0 0 0 0 0 1\n# caf\xe9\n" + edge_3d(0, 0).encode())
    with pytest.raises(ValueError, match=f"{path}:2: not UTF-8 text \\(byte 0xe9 at column 6\\)"):
        read_g2o(path)
    assert pose_graph.main([str(path)]) == 1
    assert f"{path}:2: not UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize("seed", range(8))
def test_fuzz_bytes_that_are_not_utf8(tmp_path, seed):
    """A byte >= 0x80 that starts no valid UTF-8 sequence, at a random place of a random
    line: a ValueError naming that line, from both readers."""
    rng = np.random.default_rng([seed, 8])
    lines = [vertex_3d(k) for k in range(3)] + [edge_3d(k, k + 1) for k in range(2)]
    number = int(rng.integers(len(lines)))
    text = lines[number].encode()
    at = int(rng.integers(len(text) + 1))
    bad = bytes([int(rng.choice([0x80, 0xBF, 0xC0, 0xFF, 0xFE]))])
    raw = [line.encode() for line in lines]
    raw[number] = text[:at] + bad + text[at:]
    path = tmp_path / "bytes.g2o"
    path.write_bytes(b"\n".join(raw) + b"\n")
    with pytest.raises(ValueError, match=f"{path}:{number + 1}: not UTF-8"):
        read_g2o(path)
    bal = tmp_path / "bytes.txt"
    bal.write_bytes(b"1 1 1\n0 0 1.0 2.0\n" + b"0\n" * 9 + b"1\n2\n" + bad + b"3\n")
    with pytest.raises(ValueError, match=f"{bal}:14: not UTF-8"):
        read_bal(bal)


def test_zero_quaternion_in_a_vertex_names_file_and_line(tmp_path, capsys):
    lines = [vertex_3d(0), vertex_3d(1, 1.0, "0 0 0 0"), edge_3d(0, 1)]
    path = write(tmp_path, lines)
    with pytest.raises(
        ValueError, match=f"{path}:2: VERTEX_SE3:QUAT's quaternion \\(0 0 0 0\\) is zero"
    ):
        read_g2o(path)
    assert pose_graph.main([str(path)]) == 1
    assert f"{path}:2" in capsys.readouterr().err


# --- BAL ------------------------------------------------------------------------------------


def bal_text(rng, cameras=2, points=3):
    observations = [(c, p) for c in range(cameras) for p in range(points)]
    lines = [f"{cameras} {points} {len(observations)}"]
    lines += [f"{c} {p} {rng.normal():.6f} {rng.normal():.6f}" for c, p in observations]
    lines += [repr(float(v)) for v in rng.normal(size=9 * cameras + 3 * points)]
    return lines


def test_bal_round_trip_is_exact(rng, tmp_path):
    path = tmp_path / "problem.txt"
    path.write_text("\n".join(bal_text(rng)) + "\n")
    problem = read_bal(path)
    problem.points[0, 0] = 1 / 3  # 17 digits
    out = tmp_path / "out.txt"
    write_bal(problem, out)
    again = read_bal(out)
    for name in ("camera_index", "point_index", "observations", "cameras", "points"):
        np.testing.assert_array_equal(getattr(again, name), getattr(problem, name), err_msg=name)


@pytest.mark.parametrize(
    "edit, line, message",
    [
        (lambda lines: ["2 3"] + lines[1:], 1, "the header must be three counts"),
        (lambda lines: lines[:2] + ["0 7 1.0 2.0"] + lines[3:], 3, "point index 7 out of range"),
        (lambda lines: lines[:2] + ["5 0 1.0 2.0"] + lines[3:], 3, "camera index 5 out of range"),
        (lambda lines: lines[:2] + ["0 0 1.0"] + lines[3:], 3, "an observation is 4 fields"),
        (lambda lines: lines[:2] + ["0 0 1.0 x"] + lines[3:], 3, "not a number"),
        (lambda lines: lines[:2] + ["0 0.5 1.0 2.0"] + lines[3:], 3, "indices must be integers"),
        (lambda lines: lines[:9] + ["nan"] + lines[10:], 10, "not finite"),
        (lambda lines: lines[:9] + ["1.0x"] + lines[10:], 10, "not a number"),
        (
            lambda lines: lines[:-1],
            33,
            "need 27 parameters after the observations, the file has 26",
        ),
    ],
)
def test_bad_bal_names_file_and_line(rng, tmp_path, edit, line, message):
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(edit(bal_text(rng))) + "\n")
    with pytest.raises(ValueError, match=message) as error:
        read_bal(path)
    assert f"{path}:{line}" in str(error.value)


def test_bal_write_is_atomic(rng, tmp_path, monkeypatch):
    import xform.optim.bal

    problem = BalProblem(
        np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros((1, 2)), np.zeros((1, 9)),
        np.zeros((1, 3)),
    )  # fmt: skip

    def fail(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(xform.optim.bal.os, "replace", fail)
    out = tmp_path / "out.txt"
    out.write_text("kept")
    with pytest.raises(OSError, match="disk full"):
        write_bal(problem, out)
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"] and out.read_text() == "kept"

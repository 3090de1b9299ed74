"""The op tables' sampling (conftest.py): a share of the ops, one case each, the same
dtype for an op in every table, rotating with the seed."""

import math
import types

import conftest
import numpy as np

import xform

OPS = sorted(xform.OPS)


class _Config:
    def __init__(self):
        self.deselected = []
        self.hook = types.SimpleNamespace(
            pytest_deselected=lambda items: self.deselected.extend(items)
        )


def _item(table: str, **params):
    case = "-".join(map(str, params.values()))
    callspec = types.SimpleNamespace(params=params)
    return types.SimpleNamespace(
        nodeid=f"tests/{table}[{case}]", callspec=callspec, get_closest_marker=lambda name: None
    )


def _items():
    items = [types.SimpleNamespace(nodeid="tests/test_x.py::test_plain")]
    items.append(_item("test_x.py::test_named", name="not an op", leadings=()))
    for table in ("test_a.py::test_values", "test_b.py::test_gradients"):
        for name in OPS:
            for leadings in ((), (5,), (2, 3)):
                for dtype in (np.float64, np.float32):
                    items.append(_item(table, name=name, leadings=leadings, dtype=dtype))
    items += [_item("test_c.py::test_second", op=xform.OPS[name]) for name in OPS]
    return items


def _sampled(monkeypatch, seed: int) -> list:
    monkeypatch.setattr(conftest, "FULL", False)
    monkeypatch.setattr(conftest, "SEED", seed)
    items, config = _items(), _Config()
    conftest.pytest_collection_modifyitems(config, items)
    assert len(items) + len(config.deselected) == len(_items())
    return items


def test_a_run_takes_a_share_of_the_ops_and_one_case_of_each(monkeypatch):
    items = _sampled(monkeypatch, 1)
    assert [i.nodeid for i in items[:2]] == [i.nodeid for i in _items()[:2]]  # not tables
    params = [i.callspec.params for i in items[2:]]
    taken = {p.get("name") or p["op"].name for p in params}
    assert taken == {name for name in OPS if conftest.taken(name)}
    assert sum(map(conftest.taken, xform.OPS)) == math.ceil(len(xform.OPS) / conftest.SHARE)
    for name in taken:
        cases = [p for p in params if p.get("name") == name]
        assert len(cases) == 2 and cases[0]["dtype"] is cases[1]["dtype"]  # one per table
        assert sum(p.get("op") is xform.OPS[name] for p in params) == 1


def test_the_ops_and_cases_rotate_with_the_seed_and_full_keeps_all(monkeypatch):
    drawn, ops = set(), set()
    for seed in range(40):
        for item in _sampled(monkeypatch, seed)[2:]:
            params = item.callspec.params
            ops.add(params.get("name") or params["op"].name)
            if "dtype" in params:
                drawn.add((params["leadings"], params["dtype"]))
    assert ops == set(OPS) and len(drawn) == 6
    monkeypatch.setattr(conftest, "FULL", True)
    items = _items()
    conftest.pytest_collection_modifyitems(_Config(), items)
    assert len(items) == len(_items())

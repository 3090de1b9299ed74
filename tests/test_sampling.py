"""The op tables' sampling (conftest.py): every op once per table, one dtype per op."""

import types

import conftest
import numpy as np


class _Config:
    def __init__(self):
        self.deselected = []
        self.hook = types.SimpleNamespace(
            pytest_deselected=lambda items: self.deselected.extend(items)
        )


def _item(table: str, **params):
    case = "-".join(map(str, params.values()))
    return types.SimpleNamespace(
        nodeid=f"tests/{table}[{case}]", callspec=types.SimpleNamespace(params=params)
    )


def _tables():
    items = [types.SimpleNamespace(nodeid="tests/test_x.py::test_plain")]
    for table in ("test_a.py::test_values", "test_b.py::test_gradients"):
        for name in ("so3_exp", "se3_log", "pose_multiply"):
            for leadings in ((), (5,), (2, 3)):
                for dtype in (np.float64, np.float32):
                    items.append(_item(table, name=name, leadings=leadings, dtype=dtype))
    return items


def test_each_table_keeps_one_case_per_op_and_the_same_dtype_in_every_table(monkeypatch):
    monkeypatch.setattr(conftest, "FULL", False)
    items, config = _tables(), _Config()
    everything = len(items)
    conftest.pytest_collection_modifyitems(config, items)
    assert items[0].nodeid == "tests/test_x.py::test_plain"  # not a table: kept
    tables = items[1:]
    assert len(tables) == 2 * 3 and len(config.deselected) == everything - 7
    for name in ("so3_exp", "se3_log", "pose_multiply"):
        kept = [i.callspec.params for i in tables if i.callspec.params["name"] == name]
        assert len(kept) == 2 and kept[0]["dtype"] is kept[1]["dtype"]


def test_the_cases_rotate_with_the_seed_and_full_keeps_them_all(monkeypatch):
    monkeypatch.setattr(conftest, "FULL", False)
    drawn = set()
    for seed in range(20):
        monkeypatch.setattr(conftest, "SEED", seed)
        items = _tables()
        conftest.pytest_collection_modifyitems(_Config(), items)
        drawn |= {(i.callspec.params["leadings"], i.callspec.params["dtype"]) for i in items[1:]}
    assert len(drawn) == 6  # every shape and dtype, over the runs
    monkeypatch.setattr(conftest, "FULL", True)
    items = _tables()
    conftest.pytest_collection_modifyitems(_Config(), items)
    assert len(items) == len(_tables())

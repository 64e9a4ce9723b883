"""The warm cost model (compile/warm_model.py): XGBoost pre-trained on committed databases' records, cached by a
digest of their record files, loaded by tuning with `cost_model: xgb_warm`."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.s_tir import meta_schedule as ms

from workbench.compile.databases import open_database
from workbench.compile.design_spaces import without_tensor_intrin_import
from workbench.compile.warm_model import cache_path, digest, training_databases, warm_cost_model
from workbench.config import TuningConfig

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "schedules" / "mobilenet_block" / "llvm-znver4"  # 105 committed records


@pytest.fixture()
def schedules(tmp_path, monkeypatch):
    """A folder of roots holding one committed database, and a private cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(SMALL, tmp_path / "schedules" / "mobilenet_block" / SMALL.name)
    return tmp_path / "schedules"


def spearman(a, b) -> float:
    ranks = [np.argsort(np.argsort(x)) for x in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


def test_pretrained_model_ranks_measured_schedules_and_is_cached(schedules):
    target = tvm.target.Target({"kind": "llvm", "mcpu": "rocketlake"})
    assert training_databases(target, [schedules]) == [schedules / "mobilenet_block" / SMALL.name]
    assert training_databases(tvm.target.Target({"kind": "cuda", "arch": "sm_80"}), [schedules]) == []
    model = warm_cost_model(target, 2, [schedules])
    path = cache_path(digest(training_databases(target, [schedules])))
    assert path.exists() and model.booster is not None and model.data_size > 50

    # what it learned: on the workload with the most records, faster schedules score higher
    records = open_database(SMALL, create=False).get_all_tuning_records()
    by_workload: dict = {}
    for record in records:
        by_workload.setdefault(record.workload, []).append(record)
    workload, mine = max(by_workload.items(), key=lambda item: len(item[1]))
    with without_tensor_intrin_import():
        context = ms.TuneContext(mod=workload.mod, target=mine[0].target, num_threads=2)
    scores = model.predict(context, [r.as_measure_candidate() for r in mine])
    speeds = [-float(np.median([float(s) for s in r.run_secs])) for r in mine]
    assert len(mine) >= 8 and spearman(scores, speeds) > 0.3

    saved = path.stat().st_mtime_ns
    loaded = warm_cost_model(target, 2, [schedules])  # from the cache: same data, not trained again
    assert loaded.data_size == model.data_size and path.stat().st_mtime_ns == saved


def test_the_config_names_it_and_a_kind_without_databases_starts_cold(schedules):
    assert TuningConfig(cost_model="xgb_warm").cost_model == "xgb_warm"
    cold = warm_cost_model(tvm.target.Target({"kind": "cuda", "arch": "sm_80"}), 2, [schedules])
    assert cold.booster is None and cold.data_size == 0

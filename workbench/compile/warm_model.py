"""A cost model that starts warm (`tuning.cost_model: xgb_warm`): MetaSchedule's XGBoost model pre-trained on the
records of the committed schedule databases of the same target kind, so a new model's first search rounds are
ranked by what hundreds of measured schedules taught, not at random.

A cold XGBoost model scores candidates randomly until it has measured `num_warmup_samples` of them, then learns
from one kernel's handful of trials; tuning in minutes spends much of its budget there. XGBModel ranks candidates
within a workload (its targets are min cost / cost per workload), so what it learns from other kernels carries over
as "what makes a schedule fast on this CPU" (vectorized inner loops, parallel outer ones, tiles that fit).

Pre-training replays each record's trace on its workload and extracts MetaSchedule's features (one replay per
committed record, too slow to repeat for every tuning run); the trained model is cached under the user's cache
folder, named by a digest of the databases' record files, so it is trained once per change of the committed databases.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path

import platformdirs
import tvm
from tvm.s_tir import meta_schedule as ms

import workbench.kernels.x86_int8  # noqa: F401 - registers the workbench's dot-product intrinsics traces use
from workbench.compile.databases import RECORDS_FILE, is_database, open_database
from workbench.compile.design_spaces import without_tensor_intrin_import
from workbench.compile.schedule_sources import COMMITTED_SCHEDULES, shared_roots

log = logging.getLogger("workbench.tuning")
XGB_WARMUP_SAMPLES = 8  # not 100: with tens of trials per task the default would never train (compile/tune.py)


def training_databases(target: tvm.target.Target, folders: Iterable[Path] = (COMMITTED_SCHEDULES,)) -> list[Path]:
    """The database folders under `folders` (folders of roots, as schedules/ is) tuned for the target's kind
    (`llvm-*` for a CPU target: every x86 CPU's records teach the same loop structures)."""
    prefix = f"{target.kind.name}-"
    found = []
    for folder in folders:
        for root in shared_roots(Path(folder)):
            found += [db for db in sorted(root.iterdir()) if db.is_dir() and db.name.startswith(prefix)
                      and is_database(db)]
    return found


def digest(databases: list[Path]) -> str:
    """A short digest of the databases' record files: the cached model is retrained when any changes."""
    sha = hashlib.sha256()
    for db in databases:
        sha.update(db.name.encode())
        sha.update((db / RECORDS_FILE).read_bytes())
    return sha.hexdigest()[:16]


def new_model(num_cores: int) -> ms.cost_model.XGBModel:
    return ms.cost_model.XGBModel(num_warmup_samples=XGB_WARMUP_SAMPLES, num_tuning_cores=num_cores,
                                  tree_method="auto")


def pretrain(model: ms.cost_model.XGBModel, databases: list[Path], num_cores: int) -> int:
    """Train `model` on every record of `databases` (one update per workload); how many records it learned from."""
    learned = 0
    for path in databases:
        by_workload: dict = {}
        for record in open_database(path, create=False).get_all_tuning_records():
            if record.run_secs:
                by_workload.setdefault(record.workload, []).append(record)
        for workload, records in by_workload.items():
            with without_tensor_intrin_import():
                context = ms.TuneContext(mod=workload.mod, target=records[0].target, num_threads=num_cores)
            try:
                candidates = [record.as_measure_candidate() for record in records]
            except Exception as exc:  # noqa: BLE001 - a trace that no longer replays (TVM raises many types)
                log.debug("warm model: skipped %d records of a workload: %s", len(records), exc)
                continue
            model.update(context, candidates, [ms.runner.RunnerResult(run_secs=record.run_secs, error_msg=None)
                                               for record in records])
            learned += len(records)
    return learned


def cache_path(key: str) -> Path:
    return Path(platformdirs.user_cache_dir("workbench")) / "cost_models" / f"xgb_warm_{key}.tar"


def warm_cost_model(target: tvm.target.Target, num_cores: int,
                    folders: Iterable[Path] = (COMMITTED_SCHEDULES,)) -> ms.cost_model.XGBModel:
    """The XGBoost model pre-trained on `folders`' databases for the target's kind (trained and cached on first
    use); a cold one, with a warning, where there is nothing to train on."""
    databases = training_databases(target, folders)
    model = new_model(num_cores)
    if not databases:
        log.warning("cost_model xgb_warm: no committed %s databases to learn from; starting cold", target.kind.name)
        return model
    path = cache_path(digest(databases))
    if not path.exists():
        log.warning("cost_model xgb_warm: pre-training on %d databases (once; cached in %s)", len(databases), path)
        learned = pretrain(model, databases, num_cores)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.tar")
        model.save(str(partial))
        partial.replace(path)  # a crash mid-save leaves no half model to load
        log.warning("cost_model xgb_warm: learned from %d records", learned)
        return model
    model.load(str(path))
    return model

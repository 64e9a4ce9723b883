"""A study: one sweep over many models × the variants an ablation of a pipeline makes (sweep/study.py), and its
report: per model and pass, the slowdown when the pass is dropped, with CIs, as a heatmap, a table and a CSV."""

import csv
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from workbench.cli import main
from workbench.config.named_pipelines import NAMED_PIPELINES
from workbench.errors import UserError
from workbench.models.corpus import load_corpus
from workbench.sweep.spec import load_sweep
from workbench.sweep.study import FULL, Ablation, ablation_pipelines, model_cases
from workbench.sweep.study_report import SAME_IR


def write_study(tmp_path: Path, sweep: dict, base: dict | None = None) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"base": base or {"baselines": ["ort_none"], "measure": {"warmup": 1, "repeat": 5}},
                                    "sweep": sweep, "output": str(tmp_path / "out")}))
    return path


def test_the_ablation_of_default_drops_each_step_once_and_tries_fuse_at_opt_level_1():
    steps = NAMED_PIPELINES["default"].text_for("llvm").split(",")
    variants = ablation_pipelines(Ablation.model_validate("default"), "llvm")
    labels = [label for label, _ in variants]
    assert labels[0] == FULL and len(variants[0][1]) == len(steps)
    assert labels.count("-fold_constant#1") == labels.count("-fold_constant#2") == 1  # used twice: dropped twice
    dropped = [(label, specs) for label, specs in variants if label.startswith("-")]
    assert len(dropped) == len(steps) and all(len(specs) == len(steps) - 1 for _, specs in dropped)
    assert "fuse(opt_level=1)" in labels
    fuse = dict(variants)["fuse(opt_level=1)"]
    assert [s.params for s in fuse if s.name == "fuse"] == [{"opt_level": 1}]
    with pytest.raises(UserError, match="not in the pipeline"):
        ablation_pipelines(Ablation(pipeline="fold_constant,dce", alternatives={"fuse": [{"opt_level": 0}]}), "llvm")


def test_models_are_the_corpus_its_names_or_full_mappings_each_once():
    corpus = load_corpus()
    assert [c.name for c in model_cases("corpus")] == [e.name for e in corpus.models]
    mine = {"name": "mine", "source": "zoo:convnet_small", "inputs": {"x": [1, 3, 16, 16]},
            "tolerance": {"rtol": 1e-3, "atol": 1e-4}}
    cases = model_cases(["alexnet_small", mine])
    assert [c.name for c in cases] == ["alexnet_small", "mine"] and cases[1].model["source"] == "zoo:convnet_small"
    applied = cases[0].apply({"target": "llvm", "accuracy": {"reference": "ort_none"}})
    assert applied["name"] == "alexnet_small" and applied["accuracy"]["reference"] == "ort_none"
    with pytest.raises(UserError, match="not in the corpus"):
        model_cases(["alexnet_smal"])
    with pytest.raises(UserError, match="repeated: convnet_small"):
        model_cases(["convnet_small", "convnet_small"])


def test_a_study_expands_model_by_model_and_refuses_orderings_beside_ablation(tmp_path):
    sweep = load_sweep(write_study(tmp_path, {"models": ["convnet_small", "transformer_block"],
                                              "ablation": "fold_constant,fuse,dce"}))
    assert [(v.grid["model"], v.ablation) for v in sweep.variants] == [
        (model, label) for model in ("convnet_small", "transformer_block")
        for label in (FULL, "-fold_constant", "-fuse", "fuse(opt_level=1)", "-dce")]
    assert sweep.variants[0].config["name"] == "convnet_small"
    full = {v.grid["model"]: v for v in sweep.variants if v.ablation == FULL}
    assert all(v.reference is None if v.ablation == FULL else v.reference == full[v.grid["model"]].config
               for v in sweep.variants)  # each variant is timed beside its own model's full pipeline
    from workbench.sweep.driver import model_batches

    assert [{v.grid["model"] for v in batch} for batch in model_batches(sweep.variants, tuned=False)] == [
        {"convnet_small"}, {"transformer_block"}]  # hashed and measured model by model
    assert len(model_batches(sweep.variants, tuned=True)) == 1  # one tuning over every model's kernels
    with pytest.raises(UserError, match="remove sweep.orderings"):
        load_sweep(write_study(tmp_path, {"models": ["convnet_small"], "ablation": "default",
                                          "orderings": ["fuse,dce"]}))


@pytest.mark.slow
def test_a_small_study_runs_and_reports_every_model_and_pass(tmp_path, capsys):
    """Two zoo models × (full, each of 3 steps dropped, fuse at opt_level 1): built, timed, checked against ORT;
    the report has the heatmap and a cell per model and variant, and a pass with nothing to do on a model (batch
    norm folding on the transformer block) is the same IR as the full pipeline, built once."""
    path = write_study(tmp_path, {"models": ["convnet_small", "transformer_block"],
                                  "ablation": "fold_batchnorm,fuse,dce", "workers": 1})
    assert main(["sweep", str(path)]) == 0
    out = tmp_path / "out"
    cells = list(csv.DictReader((out / "study.csv").open()))
    assert {(c["model"], c["label"]) for c in cells} == {
        (model, label) for model in ("convnet_small", "transformer_block")
        for label in ("-fold_batchnorm", "-fuse", "fuse(opt_level=1)", "-dce")}
    by = {(c["model"], c["label"]): c for c in cells}
    assert by[("transformer_block", "-fold_batchnorm")]["verdict"] == SAME_IR
    assert by[("convnet_small", "-fold_batchnorm")]["verdict"] != SAME_IR  # it has batch norms to fold
    unfused = by[("convnet_small", "-fuse")]
    assert float(unfused["median_ms"]) > 0 and float(unfused["low"]) <= float(unfused["ratio"]) <= float(unfused["high"])
    assert unfused["paired"] == "True"  # timed beside the full pipeline's build, in the same process
    from workbench.record.result import RunResult

    run = RunResult.read(out / "variants" / _variant_id(out, "-fuse"))
    assert float(unfused["ratio"]) == pytest.approx(run.measurements["workbench"].median_ms
                                                    / run.measurements[FULL].median_ms)
    assert matplotlib.image.imread(out / "study.png").shape[2] in (3, 4)
    report = (out / "report.md").read_text()
    assert "## What each pass buys, per model" in report and "| transformer_block |" in report
    assert "Best pipeline found per model" in report
    assert all(r["status"] == "done" for r in _variants(out))


def _variants(out: Path) -> list[dict]:
    import sqlite3

    with sqlite3.connect(out / "results.sqlite") as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT id, status, ablation FROM sweep_variants")]


def _variant_id(out: Path, label: str) -> str:
    """The id of the convnet_small variant with this ablation label (the first model's)."""
    return next(r["id"] for r in _variants(out) if r["ablation"] == label)


def test_a_cell_whose_full_pipeline_ran_at_an_unusual_time_is_unsteady_not_a_finding():
    """A process can run one build at a fraction of its speed while the other label beside it runs as usual; the
    paired ratio does not cancel that. A cell whose full pipeline ran more than UNSTEADY_FACTOR from its time in the
    model's other cells is UNSTEADY and is not the model's best pipeline."""
    from workbench.sweep.study_report import HURTS, PAYS, UNSTEADY, UNSTEADY_FACTOR, Cell, best_line, flag_unsteady

    def cell(label: str, ratio: float, full_ms: float, paired: bool = True) -> Cell:
        return Cell("m", label, False, PAYS if ratio > 1 else HURTS, ratio, ratio * 0.97, ratio * 1.03,
                    ratio * full_ms, full_ms, label, paired=paired)

    cells = flag_unsteady([cell("-a", 1.2, 0.50), cell("-b", 3.0, 0.55), cell("-c", 0.52, 1.49),
                           cell("-d", 1.1, 0.53), cell("-e", 0.9, 0.50 * UNSTEADY_FACTOR * 0.99)])
    assert [c.verdict for c in cells] == [PAYS, PAYS, UNSTEADY, PAYS, HURTS]
    assert "-e" in best_line("m", False, cells) and "-c" not in best_line("m", False, cells)
    assert cells[2].change.startswith("? (-48%")
    # too few paired cells to know the usual time: nothing is flagged
    assert [c.verdict for c in flag_unsteady([cell("-a", 1.2, 0.5), cell("-c", 0.52, 1.49)])] == [PAYS, HURTS]

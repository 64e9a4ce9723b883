"""`workbench bench corpus`: every real-model corpus entry built by the workbench (one pipeline, untuned) beside
ONNX Runtime and IREE, in this one process, on the same canonical ONNX, the same seeded inputs and the same thread
count (stages/side_by_side.py). The labels are timed in interleaved rounds; the workbench's outputs are checked
against ONNX Runtime without graph optimizations with the entry's tolerance. A model that fails (fetch, import,
pipeline, build, accuracy) is a row with its one-line reason and the next model runs. Writes corpus_<cpu>.md, .csv
and .png; one log line per model per stage, so the log of a long run reads well without a terminal.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from workbench.bench.output import RESULTS, flushed, prefixed
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment
from workbench.config.baselines import SIDE_BY_SIDE, SIDE_BY_SIDE_DEFAULT, WORKBENCH_LABEL
from workbench.config.pipeline_spec import to_text
from workbench.errors import UserError
from workbench.kernels.x86_bf16 import BF16_FEATURE, bf16_target
from workbench.measure.contention import contention_since, thread_contention
from workbench.models.accuracy import BF16_RULE, runs_bf16
from workbench.models.corpus import CORPUS_FILE, CorpusEntry, load_corpus
from workbench.record.corpus_table import Row, Setting, write, write_not_measured
from workbench.record.results_page import cpu_name, load_suffix, versions
from workbench.runtime.threads import target_threads
from workbench.stages.side_by_side import bench


@dataclass(frozen=True)
class CorpusOptions:
    """Which entries, the workbench's pipeline, the baselines beside it, the timing protocol, where pages go."""

    only: list[str] | None = None
    pipeline: str = "default"
    baselines: tuple[str, ...] = SIDE_BY_SIDE_DEFAULT
    repeat: int = 10
    rounds: int = 3
    out: Path = RESULTS
    corpus: Path = CORPUS_FILE
    load: int = 0  # processes spinning beside (`--load`): the page says so and its name ends in _load<N>
    log: Callable[[str], None] = field(default=flushed, compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.baselines) - set(SIDE_BY_SIDE))
        if unknown:
            raise UserError(f"--baselines: {', '.join(unknown)} unknown; choose from {', '.join(SIDE_BY_SIDE)}")

    def entries(self) -> list[CorpusEntry]:
        return load_corpus(self.corpus).select(self.only)

    def experiments(self, entries: list[CorpusEntry] | None = None) -> list[Experiment]:
        """The selected entries as experiments (a bad pipeline or selection fails here, before any model runs)."""
        return [entry.experiment(self.pipeline, list(self.baselines)) for entry in entries or self.entries()]


def summary(row: Row, baselines: tuple[str, ...]) -> str:
    """One log line for a model: its status, the workbench's median and each baseline's ratio."""
    ours = row.medians_ms.get(WORKBENCH_LABEL)
    timed = [f"workbench {ours:.3f} ms"] if ours else []
    timed += [f"{label}/workbench {row.ratio(label):.2f}x" for label in baselines if row.ratio(label)]
    return f"{row.name}: {row.status}" + (f", {', '.join(timed)}" if timed else "") + \
        (f" ({row.reason})" if row.reason else "")


def pipeline_suffix(pipeline: str) -> str:
    """The page name's part for a pipeline other than `default` (`_default_bf16`), so its page sits beside the
    default's instead of replacing it."""
    return "" if pipeline == "default" else "_" + re.sub(r"[^A-Za-z0-9]+", "_", pipeline).strip("_")[:48]


def untuned_row(experiment: Experiment, options: CorpusOptions, log: Callable[[str], None]) -> Row:
    """The model built untuned and timed beside the options' baselines."""
    with tempfile.TemporaryDirectory(prefix="bench_corpus_") as work_dir:
        row = bench(experiment, list(options.baselines), Path(work_dir), options.repeat, options.rounds, log)
    log(summary(row, options.baselines))
    return row


def run_corpus(options: CorpusOptions) -> list[Path]:
    """Every selected model side by side; return the page's files (Markdown, CSV, PNG). A bf16 pipeline on a CPU
    without AVX512_BF16 measures nothing: its page says why, and the run exits 2."""
    entries = options.entries()
    experiments = options.experiments(entries)
    target = make_target(experiments[0].target)
    bf16 = runs_bf16(WORKBENCH_LABEL, experiments[0].pipeline)
    setting = Setting(date=datetime.now().strftime("%Y-%m-%d %H:%M"), cpu=cpu_name(), target=target_key(target),
                      threads=target_threads(target), pipeline=options.pipeline,
                      passes=to_text(experiments[0].pipeline), baselines=tuple(options.baselines),
                      repeat=options.repeat, rounds=options.rounds, versions=versions(), load=options.load,
                      **({"accuracy_rule": BF16_RULE} if bf16 else {}))
    stem = f"corpus_{host_cpu()}{pipeline_suffix(options.pipeline)}{load_suffix(options.load)}"
    if bf16 and not bf16_target(target):
        page = write_not_measured(setting, f"`{target_key(target)}` has no {BF16_FEATURE}: the `bf16` pass would "
                                  "compute every bf16 product as fp32 with conversions around it, so it refuses "
                                  "(docs/precision.md).", options.out, stem)
        raise UserError(f"bf16 not measured: this CPU ({target_key(target)}) has no {BF16_FEATURE}; wrote {page}")
    contended = thread_contention(setting.threads)
    rows = [untuned_row(experiment, options, prefixed(options.log, f"[{i}/{len(experiments)}] "))
            for i, experiment in enumerate(experiments, 1)]
    setting = replace(setting, date=datetime.now().strftime("%Y-%m-%d %H:%M"),  # when the last model finished
                      contention=contention_since(setting.threads, contended))
    written = write(rows, {entry.name: entry for entry in entries}, setting, options.out, stem)
    options.log("wrote " + ", ".join(str(path) for path in written))
    return written

"""`workbench bench corpus`: every real-model corpus entry built by the workbench (one pipeline, untuned) beside
ONNX Runtime and IREE, in this one process, on the same canonical ONNX, the same seeded inputs and the same thread
count (stages/side_by_side.py). The labels are timed in interleaved rounds; the workbench's outputs are checked
against ONNX Runtime without graph optimizations with the entry's tolerance. A model that fails (fetch, import,
pipeline, build, accuracy) is a row with its one-line reason and the next model runs. Writes corpus_<cpu>.md, .csv
and .png; one log line per model per stage, so the log of a long run reads well without a terminal.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.config.pipeline_spec import to_text
from workbench.errors import UserError
from workbench.models.corpus import CORPUS_FILE, load_corpus
from workbench.record.corpus_table import Row, Setting, write
from workbench.record.results_page import cpu_name, versions
from workbench.runtime.threads import target_threads
from workbench.stages.side_by_side import COMPARED, bench

RESULTS = Path("docs") / "results"


def flushed(line: str) -> None:
    """Print a line at once (the log of a background run is read while it runs)."""
    print(line, flush=True)


def prefixed(log: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    return lambda line: log(prefix + line)


@dataclass(frozen=True)
class CorpusOptions:
    """Which entries, the workbench's pipeline, the baselines beside it, the timing protocol, where pages go."""

    only: list[str] | None = None
    pipeline: str = "default"
    baselines: tuple[str, ...] = ("ort_all", "openvino", "iree")
    repeat: int = 10
    rounds: int = 3
    out: Path = RESULTS
    corpus: Path = CORPUS_FILE
    log: Callable[[str], None] = field(default=flushed, compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.baselines) - set(COMPARED))
        if unknown:
            raise UserError(f"--baselines: {', '.join(unknown)} unknown; choose from {', '.join(COMPARED)}")

    def experiments(self) -> list[Experiment]:
        """The selected entries as experiments (a bad pipeline or selection fails here, before any model runs)."""
        entries = load_corpus(self.corpus).select(self.only)
        return [entry.experiment(self.pipeline, list(self.baselines)) for entry in entries]


def summary(row: Row, baselines: tuple[str, ...]) -> str:
    """One log line for a model: its status, the workbench's median and each baseline's ratio."""
    ours = row.medians_ms.get(WORKBENCH_LABEL)
    timed = [f"workbench {ours:.3f} ms"] if ours else []
    timed += [f"{label}/workbench {row.ratio(label):.2f}x" for label in baselines if row.ratio(label)]
    return f"{row.name}: {row.status}" + (f", {', '.join(timed)}" if timed else "") + \
        (f" ({row.reason})" if row.reason else "")


def untuned_row(experiment: Experiment, options: CorpusOptions, log: Callable[[str], None]) -> Row:
    """The model built untuned and timed beside the options' baselines."""
    with tempfile.TemporaryDirectory(prefix="bench_corpus_") as work_dir:
        row = bench(experiment, list(options.baselines), Path(work_dir), options.repeat, options.rounds, log)
    log(summary(row, options.baselines))
    return row


def run_corpus(options: CorpusOptions) -> list[Path]:
    """Every selected model side by side; return the page's files (Markdown, CSV, PNG)."""
    experiments = options.experiments()
    rows = [untuned_row(experiment, options, prefixed(options.log, f"[{i}/{len(experiments)}] "))
            for i, experiment in enumerate(experiments, 1)]
    target = make_target(experiments[0].target)
    setting = Setting(date=datetime.now().strftime("%Y-%m-%d %H:%M"), cpu=cpu_name(), target=target_key(target),
                      threads=target_threads(target), pipeline=options.pipeline,
                      passes=to_text(experiments[0].pipeline), baselines=tuple(options.baselines),
                      repeat=options.repeat, rounds=options.rounds, versions=versions())
    entries = {entry.name: entry for entry in load_corpus(options.corpus).select(options.only)}
    written = write(rows, entries, setting, options.out, f"corpus_{host_cpu()}")
    options.log("wrote " + ", ".join(str(path) for path in written))
    return written

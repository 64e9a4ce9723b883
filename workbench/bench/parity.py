"""`workbench bench parity`: time to parity. Each corpus model is timed untuned, then tuned (from a cold, empty
database; with `shared`, starting from the committed schedules/ of the other configs, never those tuned on the same
model, as a user's tuning and build read them) in steps up to `tune_minutes` wall-clock minutes, and after each
step built with the database(s) and timed against ort_all again. Each step first profiles the build as it stands
and tunes its hottest kernels first. The page (parity_[warm_][shared_]<cpu>.md/.csv/.png) is rewritten after every
model; with `resume` the models it already has without a failed point are kept, so a long run goes on where it
stopped.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from rich.console import Console

from workbench.bench.corpus import CorpusOptions, untuned_row
from workbench.bench.output import prefixed
from workbench.compile.schedule_sources import COMMITTED_SCHEDULES, schedule_sources
from workbench.compile.targets import host_cpu, make_target, target_key
from workbench.config import Experiment, TuningConfig
from workbench.config.baselines import WORKBENCH_LABEL
from workbench.errors import UserError, one_line
from workbench.record.corpus_table import Row
from workbench.record.parity import CHECKPOINT_PASSED, ParityPoint, read_points, write_parity
from workbench.record.results_page import Machine
from workbench.runtime.threads import target_threads
from workbench.stages import optimize, prepare
from workbench.stages.side_by_side import bench
from workbench.stages.tuning import tune_optimized

CONFIGS = COMMITTED_SCHEDULES.parent / "configs"  # the experiment files the committed schedules were tuned for


@dataclass(frozen=True)
class ParityOptions:
    """The corpus run's options, the tuning budget and its checkpoints (default: a quarter, a half, all of it)."""

    corpus: CorpusOptions
    tune_minutes: float
    checkpoints: tuple[float, ...] = ()
    trials_per_task: int | None = None  # None: no cap, each round to the kernel that may gain most
    cost_model: str = "xgb"
    shared: bool = False
    resume: bool = False
    configs: Path = field(default=CONFIGS)

    def __post_init__(self) -> None:
        minutes = self.tune_minutes
        if minutes <= 0:
            raise UserError(f"--tune-minutes: {minutes:g}; give the minutes of tuning per model (> 0)")
        checkpoints = tuple(sorted(set(self.checkpoints or (minutes / 4, minutes / 2, minutes))))
        if checkpoints[0] <= 0 or checkpoints[-1] > minutes:
            raise UserError("--checkpoints: minutes in (0, --tune-minutes]")
        object.__setattr__(self, "checkpoints", checkpoints)

    @property
    def stem(self) -> str:
        return f"parity_{'warm_' if self.cost_model == 'xgb_warm' else ''}{'shared_' if self.shared else ''}" \
               f"{host_cpu()}"


def run_parity(options: ParityOptions) -> list[Path]:
    """Time to parity, model by model, the page rewritten after each (a crash loses at most the model in flight)."""
    corpus, log = options.corpus, options.corpus.log
    experiments = corpus.experiments()
    target = make_target(experiments[0].target)
    found = read_points(corpus.out / f"{options.stem}.csv") if options.resume else []
    failed = {point.model for point in found if point.failed}  # run again: the cause may be fixed since
    points = [point for point in found if point.model not in failed]
    done = {point.model for point in points}
    start = ("starting from the committed schedules/ of the other configs (never the model's own; read only)"
             if options.shared else "from an empty database (no shared schedules)")
    cap = f"at most {options.trials_per_task} trials per kernel, " if options.trials_per_task else ""
    checkpoints = ", ".join(f"{m:g}" for m in options.checkpoints)
    protocol = (f"- workbench: pipeline `{corpus.pipeline}`, tuned {start}, cost model `{options.cost_model}`, "
                f"{cap}each search round to the kernel that may win the model most (compile/gain.py: the hottest "
                f"of the current build's profile first), records kept only where the model ran faster with them "
                f"(stages/model_check.py), measured after {checkpoints} min of tuning (wall clock; 0: untuned)\n"
                f"- timing: median of {corpus.rounds} interleaved rounds of {corpus.repeat} runs, beside ort_all")
    machine = Machine(target_key(target), target_threads(target))
    for i, experiment in enumerate(experiments, 1):
        model_log = prefixed(log, f"[{i}/{len(experiments)}] ")
        if experiment.name in done:
            model_log(f"{experiment.name}: kept from {options.stem}.csv (--resume)")
            continue
        points += time_to_parity(experiment, untuned_row(experiment, corpus, model_log), options)
        write_parity(points, machine, "ort_all", protocol, corpus.out, options.stem)
    written = write_parity(points, machine, "ort_all", protocol, corpus.out, options.stem)
    log("wrote " + ", ".join(str(path) for path in written))
    return written


def own_roots(experiment: Experiment, configs: Path = CONFIGS) -> set[str]:
    """The committed schedule roots tuned on this very model: the one named after it, and those whose config
    (configs/<root>.yaml) builds the same model source (schedules/quickstart is convnet_small's)."""
    names = {experiment.name}
    for config in configs.glob("*.yaml"):
        source = (yaml.safe_load(config.read_text()) or {}).get("model", {}).get("source")
        if source == experiment.model.source:
            names.add(config.stem)
    return names


def time_to_parity(experiment: Experiment, untuned: Row, options: ParityOptions) -> list[ParityPoint]:
    """The untuned row as the 0-minute point, then one point per checkpoint: tune (resuming) until it, build with
    the database, time it beside ort_all. A checkpoint the previous step's last round already ran past is not
    tuned again: its point is the measurement at the minutes actually spent, noted as such. A model that failed
    untuned, or fails to tune, keeps its reason."""
    corpus = options.corpus
    log: Callable[[str], None] = prefixed(corpus.log, f"[parity {experiment.name}] ")
    points = [ParityPoint(experiment.name, 0, 0, 0, untuned.medians_ms.get(WORKBENCH_LABEL),
                          untuned.medians_ms.get("ort_all"), untuned.reason or "")]
    if untuned.failure:
        return points
    target = make_target(experiment.target)
    prepared, module = None, None  # the model after its pipeline: the same at every checkpoint, made once
    own = own_roots(experiment, options.configs)
    shared = [root for root in sorted(COMMITTED_SCHEDULES.iterdir()) if root.is_dir() and root.name not in own
              ] if options.shared else []
    with tempfile.TemporaryDirectory(prefix="parity_") as work:
        spent, trials = 0.0, 0
        for checkpoint in options.checkpoints:
            if spent >= checkpoint:  # the previous step's last round ran past this checkpoint: nothing left to tune
                previous = points[-1]  # a failure's reason (a bench that failed) stays: the point is that one
                points.append(replace(previous, checkpoint=checkpoint, note=previous.note if previous.failed else
                                      f"{CHECKPOINT_PASSED}: the step to {previous.checkpoint:g} min ran to "
                                      f"{spent:.2f} min"))
                log(f"{checkpoint:g} min: already passed ({spent:.2f} min spent); its point is that measurement")
                continue
            cap = {"trials_per_task": options.trials_per_task} if options.trials_per_task else {}
            tuning = TuningConfig(minutes=checkpoint - spent, database=Path(work) / "db", shared=shared,
                                  cost_model=options.cost_model, **cap)
            tuned_experiment = experiment.model_copy(update={"tuning": tuning, "output": Path(work) / "out"})
            try:
                if module is None:
                    prepared = prepare(experiment, Path.cwd(), target)
                    module = optimize(prepared, experiment.pipeline, stats=False).module
                tuned = tune_optimized(module, target, tuned_experiment, Path.cwd(), Console(quiet=True),
                                       prepared.inputs)
            except Exception as exc:  # a model that cannot be tuned is a point with its reason, not a crash
                points.append(ParityPoint(experiment.name, checkpoint, spent, trials, None, None,
                                          f"tuning: {one_line(exc)}"))
                break
            spent += tuned.clock.used()
            trials += sum(task.trials_run for task in tuned.tasks)
            log(f"{spent:.1f} min, {trials} trials: {tuned.clock.reason()}")
            row = bench(tuned_experiment, ["ort_all"], Path(work), corpus.repeat, corpus.rounds, log,
                        sources=schedule_sources(tuned_experiment, Path.cwd(), target, ""))
            points.append(ParityPoint(experiment.name, checkpoint, round(spent, 2), trials,
                                      row.medians_ms.get(WORKBENCH_LABEL), row.medians_ms.get("ort_all"),
                                      row.reason or ""))
            log(f"after {spent:.1f} min: ort_all/workbench {points[-1].ratio or 0:.2f}x")
    return points

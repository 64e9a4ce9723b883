"""The pages the `scripts/bench_*.py` benchmarks write into docs/results/: one Markdown file per benchmark and CPU,
headed by where, when and how it ran (the CPU's model name, the TVM target, the threads every runtime had, the
versions), so a measured table is never a hand-copied one without its machine.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path

from rich.table import Table

from workbench.atomic import atomic_write_text
from workbench.measure.contention import Contention
from workbench.record.markdown import markdown_table

VERSIONED = {"tvm": "apache-tvm", "onnxruntime": "onnxruntime", "onnx": "onnx", "iree": "iree-base-compiler",
             "openvino": "openvino"}


def cpu_name() -> str:
    """The CPU's model name as the OS reports it (Linux: /proc/cpuinfo), else the platform's word for it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    named = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    return named or platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    """The installed versions of the runtimes a benchmark compares."""
    found = {}
    for name, dist in VERSIONED.items():
        try:
            found[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return found


def load_suffix(load: int) -> str:
    """The end of a page's file name when it was timed beside `load` busy processes ("" when quiet)."""
    return f"_load{load}" if load else ""


def load_line(load: int) -> str:
    """A page's protocol line about processes spinning beside the benchmark ("" when quiet)."""
    return (f"- load: {load} process{'es' if load > 1 else ''} spinning beside the benchmark (`--load {load}`), "
            "each keeping a core busy: every runtime shares the machine with them\n") if load else ""


def contention_line(contention: Contention | None) -> str:
    """A page's line on how whole its cores were when it started and ended (measure/contention.py; "" unprobed)."""
    if contention is None:
        return ""
    return (f"- cores: {contention.threads} threads running a fixed multiply-add loop at once took "
            f"{contention.start:.2f}× (start) and {contention.end:.2f}× (end) as long each as one thread alone (1.0: "
            f"a core each; near {contention.threads}: the cores shared with other work on the host, every runtime "
            "slower and sub-millisecond models swinging most)\n")


@dataclass(frozen=True)
class Machine:
    """Where a benchmark ran."""

    target: str  # the TVM target key, e.g. llvm-znver2
    threads: int  # every runtime's kernels ran on this many threads
    cpu: str = field(default_factory=cpu_name)
    date: str = field(default_factory=lambda: datetime.now().strftime("%Y-%m-%d %H:%M"))
    versions: dict[str, str] = field(default_factory=versions)
    contention: Contention | None = None

    def lines(self) -> str:
        listed = ", ".join(f"{name} {version}" for name, version in self.versions.items())
        return (f"- CPU: {self.cpu} (TVM target `{self.target}`), {self.threads} threads for every runtime\n"
                f"{contention_line(self.contention)}- date: {self.date}\n- versions: {listed}")


def write_results_page(out_dir: Path, stem: str, title: str, machine: Machine, protocol: str,
                       header: tuple[str, ...], rows: list[list[str]], notes: str = "") -> Path:
    """Write `<stem>.md` into `out_dir`: the title with the CPU and date, the machine, the protocol (how it was
    measured), the table and any notes; return its path."""
    text = "\n\n".join(part for part in (
        f"# {title} on {machine.cpu}, {machine.date}", machine.lines(), protocol, markdown_table(header, rows), notes)
        if part)
    return atomic_write_text(Path(out_dir) / f"{stem}.md", text + "\n")


def rich_rows(table: Table) -> tuple[tuple[str, ...], list[list[str]]]:
    """A rich table's header and rows as text, for a script that prints its table and writes the same one."""
    header = tuple(str(column.header) for column in table.columns)
    columns = [[str(cell) for cell in column.cells] for column in table.columns]
    return header, [list(row) for row in zip(*columns)]

"""The rooms of `workbench/` keep their order: a module imports only from its own room or rooms below it, at module
level or inside a function alike, no two modules import each other (directly or round a circle), and no module
imports another module's private (underscore) name. docs/architecture.md explains the order; it is written once,
here, and the test fails when a change breaks it."""

import ast
from pathlib import Path

import workbench

# bottom to top; a room is the first name under workbench/ (a package or a module)
ROOMS = (
    ("errors", "atomic", "runtime"),  # process-wide facts: exit codes, atomic writes, threads, RPC
    ("config",),                       # the experiment schema, pipeline text, named pipelines
    ("models",),                       # sources, canonical ONNX, inputs, import to Relax, output comparison
    ("kernels",),                      # the workbench's own kernels, their schedules, the lowering pass lists
    ("passes",),                       # the pass registry, the passes, the pipeline runner
    ("compile",),                      # targets, builds, tuning, databases
    ("measure",),                      # runners, timing, profiles, baselines
    ("record",),                       # result store, reports
    ("experiment", "stages"),          # the conductor: one run, stage by stage
    ("bench",),                        # the benchmarks that write results pages
    ("sweep",),                        # many runs
    ("cli",),
)
RANK = {room: rank for rank, rooms in enumerate(ROOMS) for room in rooms}
PACKAGE = Path(workbench.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(part for part in parts if part != "__init__")


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every workbench import in `path`, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "workbench":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / submodule.replace(".", "/")).with_suffix(".py").exists() or \
                    (PACKAGE.parent / submodule.replace(".", "/")).is_dir()
                found.append((submodule, []) if is_module else (node.module, [alias.name]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names if alias.name.split(".")[0] == "workbench")
    return found


GRAPH = {module_name(path): imports(path) for path in PACKAGE.rglob("*.py")}


def room(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_every_module_is_in_a_room():
    assert {room(m) for m in GRAPH if m != "workbench"} <= set(RANK)


def test_no_room_imports_a_higher_one():
    upward = sorted(f"{m} imports {target}" for m, found in GRAPH.items() for target, _ in found
                    if room(m) in RANK and room(target) in RANK and RANK[room(target)] > RANK[room(m)])
    assert upward == []


def test_no_import_circle():
    edges = {m: {target for target, _ in found if target in GRAPH and target != m} for m, found in GRAPH.items()}
    circles = []
    for start in edges:  # a module that reaches itself
        seen, todo = set(), list(edges[start])
        while todo:
            current = todo.pop()
            if current == start:
                circles.append(start)
                break
            if current not in seen:
                seen.add(current)
                todo.extend(edges[current])
    assert circles == []


def test_no_private_name_crosses_modules():
    crossing = sorted(f"{m} takes {name} from {target}" for m, found in GRAPH.items() for target, names in found
                      for name in names if name.startswith("_"))
    assert crossing == []

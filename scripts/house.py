"""The house drawn from imports: rooms, arrows between them, cycles, and module sizes.

    python scripts/house.py [ROOT]      # ROOT: a checkout holding surgeon_widgets/ (default: ..)

Every ``import`` of every module of ``ROOT/surgeon_widgets`` is read with :mod:`ast`, at module
level and inside functions, relative imports resolved. A module's room is the longest entry of
:data:`ROOMS` its name lies in, so a flat layout maps by folder. Exits 1 on a module-level
import cycle, an upward arrow (a room importing a room later in :data:`ROOMS`), a private name
imported across rooms, a Jupyter import in the engine or the recorder, or a thread, process
or C library of ours outside the list below.

Threads, processes and C libraries: the package lives inside the user's training process, so
every thread of ours is one ARCHITECTURE.md names (Boundaries: Threads), each a daemon or joined
with a bound at exit, nothing of ours starts a compiler, and the one C library loaded is the
one built with the package.
A module may import ``threading``, ``_thread``, ``concurrent``, ``subprocess``,
``multiprocessing`` (also torch's) or ``ctypes``, or call ``os.system``, ``os.fork`` and the
like (:data:`OS_PROCESSES`), only if it is a key of :data:`THREADS` (which mirrors that list
and says why each must exist). Many modules need ``threading`` only to
guard their state or to ask which thread runs: those are listed in :data:`LOCKS_ONLY`, and may
take from ``threading`` only the names in :data:`LOCK_NAMES` (read with :mod:`ast`:
``threading.X`` attributes and ``from threading import X``), so a ``threading.Thread`` there
fails as it does anywhere else outside :data:`THREADS`. Likewise a module in
:data:`CTYPES_ONLY` may import ``ctypes`` (to load the C library built with the package) and
nothing else of them.
"""

from __future__ import annotations

import ast
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "surgeon_widgets"
# Rooms, lowest first: a room imports only itself and rooms before it. In the widget: what was
# measured (history), the host (runtime: kernel, threads, dynamo), the views' state, the one
# encoding of every message (wire), the hooks that feed it (live), the Explorer wiring them all.
# "" is the package top (cli, ipython_ext, hooks, __init__, demo): what no other entry claims.
ROOMS = [
    "engine",
    "engine.attention",
    "engine.cut",
    "record",
    "widget.history",
    "widget.runtime",
    "widget.views",
    "widget.wire",
    "widget.live",
    "widget",
    "",
]
JUPYTER = {"ipywidgets", "anywidget", "IPython", "ipykernel", "traitlets", "matplotlib", "comm"}
HEADLESS = ("engine", "record")  # every room but widget/ and the top: runs without Jupyter
BIG = 400  # lines: a file over this is a question (STYLE.md, point 3)

# Modules that may start a thread or a process of ours (or, as kernel_comms, have ipykernel
# start one for us): ARCHITECTURE.md's "Boundaries: Threads" says the same, at more length.
THREADS = {
    "record.runfolder": "the run heartbeat: status.json stays fresh while the training thread "
    "is busy (daemon, joined for 5 s by close())",
    "widget.runtime.still_output": "the still render: matplotlib off the model's thread "
    "(daemon, joined for 5 s at exit and by close())",
    "widget.run_view": "the run view's follower: reads a run folder as it grows (daemon, "
    "stopped by close())",
    "widget.runtime.kernel_comms": "the kernel subshell: ipykernel's own thread, made once per "
    "kernel, where clicks arrive while a cell runs",
    "cli": "surgeon-widgets demo: JupyterLab as a child process and a daemon waiting for it; "
    "a command of its own, never inside a training process",
    "demo.record_job": "the demo training job: its DDP ranks as processes; a command of its "
    "own, never inside a user's process",
}
# Modules that may import ``ctypes`` (and nothing else of CONCURRENCY), and why.
CTYPES_ONLY = {
    "record.accumulate_native": "loads the extension built with the package (setup.py), from "
    "the package's own folder; nothing is compiled at run time",
}
# Modules that take from ``threading`` only what guards state or tells threads apart.
LOCKS_ONLY = {
    "engine.registry", "engine.stats", "engine.torch_internals", "engine.tracing",
    "record.exchange", "record.pending", "record.signals",
    "widget.history", "widget.explorer", "widget.views.errors", "widget.live.attention",
    "widget.runtime.handover", "widget.runtime.hook_guards", "widget.runtime.ownership",
    "widget.runtime.traits",
}  # fmt: skip
LOCK_NAMES = {
    "Lock", "RLock", "Event", "Condition", "local", "current_thread", "main_thread", "get_ident",
}  # fmt: skip
CONCURRENCY = {"threading", "_thread", "concurrent", "subprocess", "multiprocessing", "ctypes",
               "torch.multiprocessing", "os"}  # fmt: skip
# os's own ways to start a process (any other use of os is fine)
OS_PROCESSES = {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "startfile"}
OS_PREFIXES = ("spawn", "exec")


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "surgeon_widgets.widget.live.hooks"
    target: str  # imported module: a module of the package, or an outside top-level name
    names: tuple[str, ...]  # what ``from target import ...`` takes (not submodules)
    internal: bool  # target is a module of the package
    module_level: bool  # runs on import: not inside a function, not under ``TYPE_CHECKING``
    line: int


@dataclass(frozen=True)
class Use:
    module: str  # e.g. "surgeon_widgets.record.runfolder"
    target: str  # one of CONCURRENCY
    name: str  # what of it is used ("" : the import itself; "Thread": threading.Thread)
    line: int


@dataclass(frozen=True)
class House:
    sizes: dict[str, int]  # module -> lines
    imports: list[Import]
    concurrency: list[Use] = ()  # imports and uses of CONCURRENCY modules


def room_of(module: str) -> str:
    """The longest room of :data:`ROOMS` that ``module`` lies in.

    >>> room_of("surgeon_widgets.engine.cut.analyze"), room_of("surgeon_widgets.cli")
    ('engine.cut', '')
    """
    inner = module.removeprefix(PACKAGE).lstrip(".")
    return max((r for r in ROOMS if f"{inner}.".startswith(f"{r}.") or not r), key=len)


def _walk(node: ast.AST, module_level: bool = True):
    """(import node, module_level) for every import below ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, module_level
        deferred = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
            isinstance(child, ast.If)  # ``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``
            and getattr(child.test, "id", getattr(child.test, "attr", None)) == "TYPE_CHECKING"
        )
        yield from _walk(child, module_level and not deferred)


def _targets(node: ast.Import | ast.ImportFrom, module: str, package: bool, modules) -> list:
    """(target module, names taken from it) for one import statement."""
    if isinstance(node, ast.Import):
        return [(a.name if a.name in modules else a.name.split(".")[0], ()) for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from the importer's package, up ``level - 1`` packages
        parts = module.split(".")[: len(module.split(".")) - node.level + package]
        base = ".".join(parts + ([node.module] if node.module else []))
    if base not in modules:
        return [(base.split(".")[0], tuple(a.name for a in node.names))]
    subs = [a.name for a in node.names if f"{base}.{a.name}" in modules]  # from pkg import sub
    rest = tuple(a.name for a in node.names if a.name not in subs)
    return [(f"{base}.{s}", ()) for s in subs] + ([(base, rest)] if rest else [])


def read_house(root: Path | str) -> House:
    """Parse every module of ``root/surgeon_widgets`` and resolve its imports."""
    files = {}
    for path in sorted((Path(root) / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    imports = []
    for module, path in files.items():
        for node, module_level in _walk(ast.parse(path.read_text(), str(path))):
            for target, names in _targets(node, module, path.name == "__init__.py", files):
                imports.append(
                    Import(module, target, names, target in files, module_level, node.lineno)
                )
    uses = [u for m, p in files.items() for u in _concurrency(m, ast.parse(p.read_text()))]
    return House({m: len(p.read_text().splitlines()) for m, p in files.items()}, imports, uses)


def _concurrency(module: str, tree: ast.AST) -> list[Use]:
    """Each import of a :data:`CONCURRENCY` module in ``tree``, and each name used from
    ``threading`` (``threading.X``, ``from threading import X``)."""
    def watched(name: str) -> str | None:
        return next((c for c in CONCURRENCY if name == c or name.startswith(c + ".")), None)

    def starts(target: str, name: str) -> bool:  # of os, only what starts a process counts
        return target != "os" or name in OS_PROCESSES or name.startswith(OS_PREFIXES)

    uses, aliases = [], {}  # aliases: local name -> threading or os
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if (target := watched(a.name)) is not None:
                    if target in ("threading", "os"):
                        aliases[a.asname or a.name] = target
                    if target != "os":
                        uses.append(Use(module, target, "", node.lineno))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if (target := watched(node.module)) is not None:
                named = target in ("threading", "os")
                uses += [Use(module, target, a.name if named else "", node.lineno)
                         for a in node.names if starts(target, a.name)]  # fmt: skip
            else:  # from torch import multiprocessing
                found = [watched(f"{node.module}.{a.name}") for a in node.names]
                uses += [Use(module, t, "", node.lineno) for t in found if t and t != "os"]
    for node in ast.walk(tree):
        target = aliases.get(getattr(getattr(node, "value", None), "id", None))
        if isinstance(node, ast.Attribute) and target and starts(target, node.attr):
            uses.append(Use(module, target, node.attr, node.lineno))
    return uses


def arrows(house: House) -> Counter:
    """(from room, to room) -> number of imports, between different rooms."""
    pairs = ((room_of(i.source), room_of(i.target)) for i in house.imports if i.internal)
    return Counter(pair for pair in pairs if pair[0] != pair[1])


def upward(house: House) -> list[Import]:
    """Imports of a room later in :data:`ROOMS` than the importer's own room."""
    internal = [i for i in house.imports if i.internal]
    return [i for i in internal if ROOMS.index(room_of(i.target)) > ROOMS.index(room_of(i.source))]


def cycles(house: House) -> list[list[str]]:
    """Module-level import cycles: the strongly connected components of two or more modules."""
    graph: dict[str, set[str]] = {m: set() for m in house.sizes}
    for i in house.imports:
        if i.internal and i.module_level and i.target != i.source:
            graph[i.source].add(i.target)
    reach = {}
    for start in graph:  # reach[v]: every module an import chain from v gets to
        seen, todo = set(), list(graph[start])
        while todo:
            if (v := todo.pop()) not in seen:
                seen.add(v)
                todo += graph[v]
        reach[start] = seen
    found = {tuple(sorted(w for w in reach[v] if v in reach[w])) for v in graph if v in reach[v]}
    return [list(c) for c in sorted(found)]


def private_across(house: House) -> list[Import]:
    """``from X import _y`` where X lies in another room than the importer."""
    return [
        i
        for i in house.imports
        if i.internal
        and room_of(i.source) != room_of(i.target)
        and any(n.startswith("_") and not n.startswith("__") for n in i.names)
    ]


def jupyter(house: House) -> list[Import]:
    """Jupyter imports outside widget/ and the package top: in the engine and the recorder."""
    return [
        i
        for i in house.imports
        if i.target in JUPYTER and room_of(i.source).split(".")[0] in HEADLESS
    ]


def threads(house: House) -> list[Use]:
    """Threads, processes or C libraries outside :data:`THREADS`: an import of a
    :data:`CONCURRENCY` module, except ``threading`` in a :data:`LOCKS_ONLY` module that uses
    only :data:`LOCK_NAMES` of it."""
    found = []
    for use in house.concurrency:
        inner = use.module.removeprefix(PACKAGE).lstrip(".")
        if inner in THREADS:
            continue
        if use.target == "ctypes" and inner in CTYPES_ONLY:
            continue
        if use.target == "threading" and inner in LOCKS_ONLY and use.name in LOCK_NAMES | {""}:
            continue
        found.append(use)
    return found


def report(house: House) -> int:
    """Print the house; return the number of problems (cycles, upward, private, Jupyter,
    threads)."""
    print(f"rooms (lowest first): {', '.join(r or '(top)' for r in ROOMS)}")
    for room in ROOMS:
        prefix = f"{PACKAGE}.{room}".rstrip(".")
        members = sorted(
            m[len(prefix) + 1 :] or "__init__" for m in house.sizes if room_of(m) == room
        )
        if members:
            print(f"  {room or '(top)'}: {len(members)} modules: {', '.join(members)}")
    print("arrows between rooms (imports):")
    for (a, b), n in sorted(arrows(house).items(), key=lambda x: [ROOMS.index(r) for r in x[0]]):
        print(f"  {a or '(top)'} -> {b or '(top)'}: {n}")
    problems = {
        "module-level import cycles": [", ".join(c) for c in cycles(house)],
        "upward arrows": [f"{i.source}:{i.line} -> {i.target}" for i in upward(house)],
        "private names across rooms": [
            f"{i.source}:{i.line} from {i.target} import {', '.join(i.names)}"
            for i in private_across(house)
        ],
        "Jupyter imports in engine/ or record/": [
            f"{i.source}:{i.line} {i.target}" for i in jupyter(house)
        ],
        "threads, processes or ctypes outside house.THREADS / CTYPES_ONLY": [
            f"{u.module}:{u.line} {u.target}{'.' + u.name if u.name else ''}"
            for u in threads(house)
        ],
    }
    for title, rows in problems.items():
        print(f"{title}: {len(rows)}" + "".join(f"\n  {row}" for row in rows))
    sizes = sorted(house.sizes.values())
    big = sorted((n, m) for m, n in house.sizes.items() if n > BIG)
    print(f"modules: {len(sizes)}, median {statistics.median(sizes):g} lines, max {sizes[-1]}")
    print(f"over {BIG} lines: {len(big)}" + "".join(f"\n  {m}: {n}" for n, m in big))
    return sum(len(rows) for rows in problems.values())


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    sys.exit(1 if report(read_house(root)) else 0)

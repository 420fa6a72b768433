"""The house drawn from imports stays the house of ARCHITECTURE.md (``scripts/house.py``).

Rooms and their order are ``house.ROOMS``; a module moved, added or removed must be named in
ARCHITECTURE.md (and a js/src folder or file in js/README.md) by the same change.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("house", ROOT / "scripts" / "house.py")
house = importlib.util.module_from_spec(_spec)
sys.modules["house"] = house  # dataclasses look their module up while the class is built
_spec.loader.exec_module(house)


@pytest.fixture(scope="module")
def repo():
    return house.read_house(ROOT)


def test_no_import_cycles(repo):
    assert house.cycles(repo) == []


def test_no_upward_arrows(repo):
    assert [f"{i.source}:{i.line} -> {i.target}" for i in house.upward(repo)] == []


def test_no_private_names_across_rooms(repo):
    found = house.private_across(repo)
    assert [f"{i.source}:{i.line} {i.target} {i.names}" for i in found] == []


def test_engine_and_record_import_no_jupyter(repo):
    assert [f"{i.source}:{i.line} {i.target}" for i in house.jupyter(repo)] == []


def _named(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w/.]){re.escape(name)}(?![\w.])", text) is not None


def test_architecture_md_names_every_module():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    package = ROOT / house.PACKAGE
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert sorted(f for f in files if not _named(text, f)) == []
    mentioned = re.findall(r"(?<![\w/.])((?:engine|record|widget|demo)/[\w/]*\.py)\b", text)
    assert sorted(set(mentioned) - files) == []  # no module that is gone


def test_js_readme_names_every_source_folder_and_file():
    text = (ROOT / "js" / "README.md").read_text()
    entries = [p.name + ("/" if p.is_dir() else "") for p in (ROOT / "js" / "src").iterdir()]
    assert sorted(e for e in entries if not _named(text, e)) == []


def test_the_checks_find_what_they_look_for(tmp_path):
    files = {
        "__init__.py": "",
        "engine/__init__.py": "",
        "engine/a.py": "from . import b\ndef later():\n    from ..widget import x\n",
        "engine/b.py": "from .a import later\nimport ipywidgets\n",
        "record/__init__.py": "from ..engine.b import _hidden\n",
        "widget/__init__.py": "",
        "widget/x.py": "import surgeon_widgets.engine.a\n" + "pass\n" * 400,
    }
    for name, text in files.items():
        path = tmp_path / house.PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    toy = house.read_house(tmp_path)
    assert house.cycles(toy) == [["surgeon_widgets.engine.a", "surgeon_widgets.engine.b"]]
    assert [(i.source, i.target) for i in house.upward(toy)] == [
        ("surgeon_widgets.engine.a", "surgeon_widgets.widget.x")
    ]
    assert [(i.source, i.names) for i in house.private_across(toy)] == [
        ("surgeon_widgets.record", ("_hidden",))
    ]
    assert [(i.source, i.target) for i in house.jupyter(toy)] == [
        ("surgeon_widgets.engine.b", "ipywidgets")
    ]
    assert house.arrows(toy)[("widget", "engine")] == 1
    assert house.report(toy) == 4


def test_no_thread_process_or_c_library_outside_the_list(repo):
    found = house.threads(repo)
    assert [f"{u.module}:{u.line} {u.target} {u.name}" for u in found] == []


def test_architecture_md_names_every_thread_of_ours():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    threads = text[text.index("- **Threads.**") : text.index("- **Tracing.**")]
    listed = {f"{m.replace('.', '/')}.py" for m in [*house.THREADS, *house.CTYPES_ONLY]}
    assert sorted(f for f in listed if not _named(threads, f.removeprefix("widget/"))
                  and not _named(threads, f)) == []  # fmt: skip


def test_the_thread_check_finds_threads_processes_and_c_outside_the_list(tmp_path):
    files = {
        "__init__.py": "",
        "engine/__init__.py": "",
        # a lock is fine in a locks-only module; a thread there is not
        "engine/registry.py": "import threading\nLOCK = threading.Lock()\n",
        "engine/stats.py": "import threading as th\nth.Thread(target=print).start()\n",
        "engine/torch_internals.py": "from threading import Timer, local\n",
        # any of them in a module on neither list
        "engine/naming.py": "import threading\nLOCK = threading.Lock()\n",
        "engine/tracing.py": "def later():\n    import subprocess\n",
        "engine/wrappers.py": "from concurrent.futures import ThreadPoolExecutor\n",
        "record/__init__.py": "import torch.multiprocessing as mp\nimport ctypes\n",
        "record/reader.py": "import os\nos.getpid()\nos.system('cc x.c')\n",
        "record/keyfile.py": "from os import path, execv\n",
        # the module loading the C library built with the package: ctypes, nothing else
        "record/accumulate_native.py": "import ctypes\nimport threading\n",
        # the listed threads may
        "record/runfolder.py": "import threading\nthreading.Thread(target=print).start()\n",
        "cli.py": "import subprocess\n",
    }
    for name, text in files.items():
        path = tmp_path / house.PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    toy = house.read_house(tmp_path)
    found = {(u.module.removeprefix("surgeon_widgets."), u.target, u.name)
             for u in house.threads(toy)}  # fmt: skip
    assert found == {
        ("engine.stats", "threading", "Thread"),
        ("engine.torch_internals", "threading", "Timer"),
        ("engine.naming", "threading", ""),
        ("engine.naming", "threading", "Lock"),
        ("engine.tracing", "subprocess", ""),
        ("engine.wrappers", "concurrent", ""),
        ("record", "torch.multiprocessing", ""),
        ("record", "ctypes", ""),
        ("record.reader", "os", "system"),
        ("record.keyfile", "os", "execv"),
        ("record.accumulate_native", "threading", ""),
    }
    assert house.report(toy) == len(house.threads(toy)) == 11

"""A C source compiled once by the system's C compiler, in the background, and called with ctypes.

For loops whose Python or torch call overhead is most of their cost (a reduction over a few
hundred values). The shared library is cached per source, compiler and machine under
``$SURGEON_WIDGETS_CACHE`` (default ``~/.cache/surgeon_widgets``), so a later process only
loads it. Until the build is done, and for good where there is no C compiler (``$CC``, ``cc``,
``gcc`` or ``clang``) or it fails (one warning says so), :meth:`NativeLibrary.get` answers
``None`` and the caller runs its Python path. Only standard C is compiled: no torch or Python
headers, so the build takes a fraction of a second.

Example:
    >>> import ctypes, tempfile
    >>> from pathlib import Path
    >>> source = Path(tempfile.mkdtemp()) / "twice.c"
    >>> _ = source.write_text("long twice(long x) { return 2 * x; }")
    >>> lib = NativeLibrary(source, {"twice": (ctypes.c_long, [ctypes.c_long])})
    >>> lib.wait()
    True
    >>> lib.get().twice(21)
    42
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

__all__ = ["NativeLibrary", "cache_dir"]

FLAGS = ("-O3", "-shared", "-fPIC", "-std=c99")


def cache_dir() -> Path:
    """Where built libraries are kept (``$SURGEON_WIDGETS_CACHE``, else under the user's cache)."""
    root = os.environ.get("SURGEON_WIDGETS_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "surgeon_widgets"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class NativeLibrary:
    """The C file ``source`` as a ctypes library with ``functions`` (name: (restype, argtypes)).

    The first :meth:`get` starts the build on a thread of its own; ``enabled=False`` never
    builds (the Python path everywhere, as on a machine without a compiler).
    """

    def __init__(
        self, source: str | Path, functions: dict[str, tuple[Any, list[Any]]], enabled: bool = True
    ) -> None:
        self.source = Path(source)
        self.functions = functions
        self.enabled = enabled
        self._lib: Any = None
        self._done: threading.Event | None = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The loaded library, or ``None`` (being built, no compiler, or disabled)."""
        if self._lib is None and self._done is None:
            self._start()
        return self._lib

    def wait(self, timeout: float = 60.0) -> bool:
        """Build now (or wait for the build under way); ``True`` if the library works."""
        done = self._start()
        if done is not None:
            done.wait(timeout)
        return self._lib is not None

    def _start(self) -> threading.Event | None:
        with self._lock:
            if self._done is None:
                self._done = threading.Event()
                if not self.enabled:
                    self._done.set()
                else:
                    name = f"surgeon_widgets {self.source.stem} build"
                    threading.Thread(target=self._build, daemon=True, name=name).start()
            return self._done

    def _build(self) -> None:
        try:
            self._lib = self._load(self._built())
        except Exception as error:  # no compiler, a failed build: the Python path stays
            warnings.warn(
                f"the C loop {self.source.name} could not be built or loaded "
                f"({type(error).__name__}: {error}); the slower Python path is used",
                RuntimeWarning,
                stacklevel=1,
            )
        finally:
            assert self._done is not None
            self._done.set()

    def _built(self) -> Path:
        compiler = _compiler()
        if compiler is None:
            raise FileNotFoundError("no C compiler ($CC, cc, gcc or clang) on PATH")
        text = self.source.read_bytes()
        parts = [compiler, " ".join(FLAGS), platform.machine(), platform.platform()]
        tag = hashlib.sha256(b"\0".join([text, *(p.encode() for p in parts)])).hexdigest()[:16]
        target = cache_dir() / f"{self.source.stem}-{tag}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        # built beside the target, then renamed: processes building at once never load half a file
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            out = Path(tmp) / target.name
            result = subprocess.run([compiler, *FLAGS, "-o", str(out), str(self.source), "-lm"],
                                    capture_output=True, text=True, timeout=120)  # fmt: skip
            if result.returncode != 0:
                raise RuntimeError(f"{Path(compiler).name} failed: {result.stderr.strip()[-500:]}")
            os.replace(out, target)
        return target

    def _load(self, path: Path) -> Any:
        lib = ctypes.CDLL(str(path))
        for name, (restype, argtypes) in self.functions.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        return lib

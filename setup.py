"""The one compiled part of the package: the recorder's C loop, built with the package.

``record/accumulate.c`` is built as an extension when the package is built (a wheel, ``pip
install .``, ``pip install -e .``: there the library lands beside the source) and loaded with
ctypes from the package's own folder by ``record/accumulate_native.py``; nothing is compiled at
run time. ``optional=True``: where no C compiler is found (an sdist install), the package
installs without it and the recorder takes its numpy / torch path (one warning says so).
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "surgeon_widgets/record/accumulate.c"
# the source's digest, built in: in a checkout, accumulate_native.py refuses a library built
# from an older accumulate.c (rebuild with `pip install -e .`)
DIGEST = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "surgeon_widgets.record._accumulate",
            [SOURCE],
            define_macros=[("SOURCE_SHA256", f'"{DIGEST}"')],
            extra_compile_args=["-O3", "-std=c99"],
            optional=True,
        )
    ]
)

"""setup.py -- builds the keel Python package (keel._keel links libkeel.a).

    make python                                     # in place, for tests
    /usr/bin/python3 -m pip install ./python        # from the repository root

Debian 12 refuses pip installs into the system Python (PEP 668): add
--break-system-packages, or install into a venv made with
`python3 -m venv --system-site-packages` (it then uses the apt numpy).
No pyproject.toml on purpose: pip then builds with the installed setuptools
and wheel instead of fetching them, so it works offline.

The extension links the static library the Makefile builds
(build/libkeel.a, compiled with -fPIC), so the installed module needs no
libkeel.so at run time, only libxxhash. build_ext runs
`make -C <repo> build/libkeel.a` first. Environment: KEEL_ROOT, the
repository (if this directory was copied elsewhere); KEEL_BUILD, the
Makefile's build directory (default build); KEEL_NO_MAKE=1 to skip make.
"""

import os
import subprocess

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("KEEL_ROOT") or os.path.dirname(HERE)
BUILD = os.environ.get("KEEL_BUILD", "build")   # the Makefile's $(BUILD)
LIB = os.path.join(ROOT, BUILD, "libkeel.a")


class BuildExt(build_ext):
    """build_ext that first brings build/libkeel.a up to date."""

    def run(self):
        if not os.path.exists(os.path.join(ROOT, "include", "keel.h")):
            raise SystemExit(
                "keel: no keel sources at %s\nhelp: build from the keel "
                "repository (pip install ./python), or set KEEL_ROOT to it"
                % ROOT)
        if not os.environ.get("KEEL_NO_MAKE"):
            subprocess.check_call(["make", "-C", ROOT, "BUILD=" + BUILD,
                                   BUILD + "/libkeel.a"])
        if not os.path.exists(LIB):
            raise SystemExit("keel: %s is missing\nhelp: run make in %s"
                             % (LIB, ROOT))
        super().run()


ext = Extension(
    "keel._keel",
    sources=["keel/_keel.c"],
    include_dirs=[os.path.join(ROOT, "include"), numpy.get_include()],
    extra_objects=[LIB],
    libraries=["xxhash", "curl", "m"],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                        "-Wno-missing-field-initializers",
                        "-Wno-cast-function-type", "-pthread"],
    # keel's internal symbols stay inside the module.
    extra_link_args=["-Wl,--exclude-libs,ALL", "-pthread"],
    depends=[LIB, os.path.join(ROOT, "include", "keel.h")],
)

setup(
    name="keel",
    version="0.1.0",
    description="An embeddable vector index in one file, for numpy",
    packages=["keel"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)

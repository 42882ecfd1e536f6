"""setup.py -- builds the keel Python package (keel._keel and the keel C
library, linked statically into it).

    make python                                     # in place, for tests
    python3 -m pip install --no-build-isolation ./python
    python3 -m build --sdist --no-isolation ./python

Only a C compiler, Python's headers, numpy, libxxhash and libcurl are needed: without
a prebuilt library, build_ext compiles keel's C sources itself (no make).
They are found in ./csrc (an sdist carries them there) or in the
repository around this folder (../src, ../include). pyproject.toml declares
setuptools and numpy as build requirements; offline, use pip's
--no-build-isolation (and build's --no-isolation) so the installed ones are
used. Debian 12 refuses pip installs into the system Python (PEP 668): add
--break-system-packages, or install into a venv made with
`python3 -m venv --system-site-packages` (it then uses the apt numpy).

Environment: KEEL_LIB, a prebuilt libkeel.a (compiled with -fPIC) to link
instead of compiling the sources (the Makefile passes its own); KEEL_ROOT,
the repository, if this folder was copied elsewhere.
"""

import os
import platform
import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))

FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-fPIC", "-pthread",
         "-Wall", "-Wextra", "-Wno-missing-field-initializers"]
# One translation unit per instruction set, each with its own flags.
ISA = {
    "x86_64": {"dist_avx2.c": ["-mavx2", "-mfma", "-mf16c"],
               "dist_avx512.c": ["-mavx512f", "-mavx512bw", "-mavx512dq",
                                 "-mavx512vl", "-mavx2", "-mfma", "-mf16c"]},
    "aarch64": {"dist_neon.c": []},
}
ALL_ISA = {"dist_avx2.c", "dist_avx512.c", "dist_neon.c"}


def c_root():
    """The folder holding keel's src/ and include/: ./csrc (an sdist),
    KEEL_ROOT, or the repository around this folder."""
    for root in (os.path.join(HERE, "csrc"), os.environ.get("KEEL_ROOT"),
                 os.path.dirname(HERE)):
        if root and os.path.exists(os.path.join(root, "include", "keel.h")) \
                and os.path.isdir(os.path.join(root, "src")):
            return root
    raise SystemExit(
        "keel: keel's C sources are missing (no csrc/ here and no ../src)\n"
        "help: build from the keel repository (pip install ./python) or from "
        "an sdist, or set KEEL_ROOT to the repository")


def library_sources(root):
    """(source, extra flags) of the C library for this machine."""
    isa = ISA.get(platform.machine(), {})
    out = []
    for folder, _, names in sorted(os.walk(os.path.join(root, "src"))):
        for name in sorted(names):
            if not name.endswith(".c"):
                continue
            if name in ALL_ISA and name not in isa:
                continue
            out.append((os.path.join(folder, name), isa.get(name, [])))
    return out


class BuildExt(build_ext):
    """build_ext that links a prebuilt libkeel.a (KEEL_LIB) or first
    compiles keel's C sources with the extension's compiler."""

    def finalize_options(self):
        super().finalize_options()
        import numpy  # a build requirement, needed only from here on
        root = c_root()
        for ext in self.extensions:
            ext.include_dirs += [os.path.join(root, "include"),
                                 numpy.get_include()]

    def build_extensions(self):
        lib = os.environ.get("KEEL_LIB")
        if lib:
            if not os.path.exists(lib):
                raise SystemExit("keel: KEEL_LIB is %s, which does not exist"
                                 "\nhelp: run make first, or unset KEEL_LIB "
                                 "to compile the sources" % lib)
            objects = [lib]
        else:
            objects = self.compile_library()
        header = os.path.join(c_root(), "include", "keel.h")
        for ext in self.extensions:
            ext.extra_objects = objects + ext.extra_objects
            ext.depends = ext.depends + objects + [header]
        super().build_extensions()

    def compile_library(self):
        root = c_root()
        objects = []
        for source, extra in library_sources(root):
            objects += self.compiler.compile(
                [source], output_dir=os.path.join(self.build_temp, "keel"),
                include_dirs=[os.path.join(root, "include"),
                              os.path.join(root, "src")],
                extra_postargs=FLAGS + extra, depends=[])
        return objects


class Sdist(sdist):
    """sdist that carries keel's C sources (src/, include/) in csrc/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = c_root()
        if os.path.abspath(root) == os.path.join(HERE, "csrc"):
            return  # already in the tree (an sdist of an sdist)
        for sub in ("src", "include"):
            dst = os.path.join(base_dir, "csrc", sub)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(os.path.join(root, sub), dst,
                            ignore=shutil.ignore_patterns("*.o", "*~"))


ext = Extension(
    "keel._keel",
    sources=["keel/_keel.c", "keel/_args.c", "keel/_errors.c",
             "keel/_filter.c", "keel/_handle.c", "keel/_published.c"],
    depends=["keel/_args.h", "keel/_errors.h", "keel/_filter.h",
             "keel/_handle.h", "keel/_published.h"],
    libraries=["xxhash", "curl", "m"],
    extra_compile_args=FLAGS + ["-Wno-cast-function-type"],
    # keel's internal symbols stay inside the module.
    extra_link_args=["-Wl,--exclude-libs,ALL", "-pthread"],
)

setup(
    name="keel",
    version="0.1.0",
    description="An embeddable vector index in one file, for numpy",
    packages=["keel"],
    package_data={"keel": ["py.typed", "*.pyi"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt, "sdist": Sdist},
    python_requires=">=3.9",
    install_requires=["numpy"],
    zip_safe=False,
)

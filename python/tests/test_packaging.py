"""test_packaging.py -- the package installs with only a C compiler and
numpy (no make), from the repository and from an sdist, and the installed
copy works when imported from another folder."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PYTHON_DIR

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pip") is None
    or importlib.util.find_spec("build") is None
    or importlib.util.find_spec("ensurepip") is None,
    reason="needs pip, build and venv (python3-pip, python3-build, "
    "python3-venv)")

SMOKE = textwrap.dedent("""
    import os, sys, numpy as np, keel
    assert keel.__file__.startswith(sys.argv[1]), keel.__file__
    with keel.VectorIndex(os.path.join(sys.argv[2], "x.keel"), 4) as ix:
        ix.add_batch(np.eye(4))
        assert ix.search(np.eye(4)[2], k=1)[0][0] == 2
    print("ok", keel.__version__)
""")


def no_make_env(tmp_path):
    """An environment whose make fails: the build must not need it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"
    make.write_text("#!/bin/sh\necho 'make must not run' >&2\nexit 3\n")
    make.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = str(bin_dir) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    env.pop("KEEL_LIB", None)
    return env


def run(args, env, cwd):
    r = subprocess.run(args, env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def install_and_import(source, tmp_path, name, env):
    target = tmp_path / name
    run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
         "--no-index", "--no-deps", "--target", str(target), source],
        env, tmp_path)
    work = tmp_path / (name + "-work")
    work.mkdir()
    env = dict(env, PYTHONPATH=str(target))
    out = run([sys.executable, "-c", SMOKE, str(target), str(work)], env,
              work)
    assert out.startswith("ok ")


def install_in_venv(tmp_path, env):
    """doc/python.md's and the README's way from a fresh clone: a venv of
    /usr/bin/python3 that sees the apt numpy, and pip install ./python."""
    venv = tmp_path / "env"
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages",
         str(venv)], env, tmp_path)
    run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation",
         "./python"], env, os.path.dirname(PYTHON_DIR))
    work = tmp_path / "venv-work"
    work.mkdir()
    out = run([str(venv / "bin" / "python"), "-c", SMOKE, str(venv),
               str(work)], env, work)
    assert out.startswith("ok ")


def test_pip_install_from_the_repository_and_from_an_sdist(tmp_path):
    env = no_make_env(tmp_path)
    install_in_venv(tmp_path, env)
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation",
         "--outdir", str(dist), PYTHON_DIR], env, tmp_path)
    (sdist,) = dist.iterdir()
    install_and_import(str(sdist), tmp_path, "from-sdist", env)

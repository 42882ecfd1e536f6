"""test_docs.py -- the README's and doc/python.md's examples run as written.

Every ```python block runs in a fresh directory with /usr/bin/python3 against
the in-place build; every ```c block is compiled against build/libkeel.a
(a fragment without main() is wrapped in one, with its undeclared query
vectors supplied) and run. A wrong example fails here. ```sh blocks are
install and build commands on real data sets, and are not run.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT

DOCS = ["README.md", os.path.join("doc", "python.md")]
LIB = os.path.join(ROOT, "build", "libkeel.a")


def blocks(lang):
    found = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for i, m in enumerate(re.finditer(r"^```%s\n(.*?)^```" % lang, text,
                                          re.S | re.M)):
            found.append(pytest.param(m.group(1), id="%s-%d" % (doc, i)))
    return found


def test_docs_have_examples():
    assert len(blocks("python")) >= 2
    assert len(blocks("c")) >= 1


@pytest.mark.parametrize("code", blocks("python"))
def test_python_example(code, tmp_path):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    r = subprocess.run(["/usr/bin/python3", "-X", "dev", "-W", "error", "-c",
                        code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr


C_WRAP = """#include <stdio.h>
#include <stdint.h>
#include <keel.h>
int main(void) {
    float vec[384], query[384];
    for (int i = 0; i < 384; i++) { vec[i] = (float)(i % 7) + 1; query[i] = (float)(i % 5) + 1; }
%s
    return 0;
}
"""


@pytest.mark.skipif(not os.path.exists(LIB) or shutil.which("cc") is None,
                    reason="needs build/libkeel.a (make) and cc")
@pytest.mark.parametrize("code", blocks("c"))
def test_c_example(code, tmp_path):
    src = code if "main(" in code else C_WRAP.replace("%s", code)
    (tmp_path / "example.c").write_text(src)
    cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", "-I",
                         os.path.join(ROOT, "include"), "example.c", "-o",
                         "example", LIB, "-lxxhash", "-lcurl", "-lpthread",
                         "-lm"], cwd=tmp_path, capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    run = subprocess.run(["./example"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "vectors.keel").exists()

"""test_stubs.py -- keel/__init__.pyi names what the package has: every
public name of the stub exists at run time and the other way round, for
the module and for each class."""

import ast
import inspect
import os

import keel
from conftest import PYTHON_DIR

STUB = os.path.join(PYTHON_DIR, "keel", "__init__.pyi")


def public(names):
    return {n for n in names if not n.startswith("_")}


def stub_tree():
    with open(STUB) as f:
        return ast.parse(f.read())


def stub_module_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets)
    return public(names) | {"__version__"}


def stub_members(tree):
    """{class: its public members, with those of its stub bases}."""
    own, bases = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases[node.name] = [b.id for b in node.bases
                                if isinstance(b, ast.Name)]
            members = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    members.add(item.target.id)
            own[node.name] = public(members)

    def members(name):
        out = set(own[name])
        for b in bases[name]:
            if b in own:
                out |= members(b)
        return out

    return {name: members(name) for name in own}


def runtime_members(cls):
    """Public members a keel class defines (in keel's own classes of its
    MRO), not those of builtins such as OSError."""
    names = set()
    for c in inspect.getmro(cls):
        if c.__module__.startswith("keel"):
            names |= public(vars(c))
    return names


def test_stub_is_shipped():
    assert os.path.exists(os.path.join(PYTHON_DIR, "keel", "py.typed"))


def test_module_names_match():
    tree = stub_tree()
    runtime = public(dir(keel)) - {"annotations"} | {"__version__"}
    runtime -= {n for n in runtime if inspect.ismodule(getattr(keel, n))}
    assert stub_module_names(tree) == runtime
    assert set(keel.__all__) <= runtime


def test_class_members_match():
    members = stub_members(stub_tree())
    for name, stub in members.items():
        cls = getattr(keel, name)
        assert stub == runtime_members(cls), name

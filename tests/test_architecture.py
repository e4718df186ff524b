"""The code's shape as docs/ARCHITECTURE.md describes it, checked on the source (AST), so the map stays true:

- every module, folder and file the map names exists, and every ``agent.x.y`` it names resolves;
- each node's declared side effects (its row in the map's node table and its module docstring) are the
  effects its code has: a node that launches says so, a node that reaches the host says so, and a node
  said to touch nothing but the transcript reaches no host;
- the limits of issue 19: no module over 600 lines, no function over 60 lines, none over 8 parameters
  (pydantic models, dataclasses and typer commands declare one parameter per field or option and are
  exempt), and at most 8 import levels inside ``agent/``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest
from test_imports import _import_graph

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ARCHITECTURE.md"
PACKAGES = ("agent", "tools", "lab", "bench")

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8
MAX_IMPORT_LEVELS = 8


# ---------------------------------------------------------------------------------------------- the map


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _named_paths(text: str) -> set[str]:
    """Repository paths the map names in backticks: ``agent/run/graph.py``, ``knowledge/served.toml``,
    ``agent/run/nodes/`` (a ``:name`` or ``(...)`` after a path is not part of it)."""
    found = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        for token in span.split():
            token = token.split(":")[0].rstrip(".,;)")
            if re.match(r"^(agent|tools|lab|bench|knowledge|docs|transcripts|tests)/[\w./*-]*$", token):
                found.add(token)
    return found


def _named_modules(text: str) -> set[str]:
    """Dotted names of this repository's modules the map names in backticks (``agent.run.recovery``)."""
    return {m for m in re.findall(r"`((?:agent|tools)(?:\.\w+)+)`", text)}


def test_every_path_the_map_names_exists() -> None:
    named = _named_paths(_doc())
    assert len(named) > 20, "the map names fewer paths than expected: is the backtick parsing broken?"
    # a placeholder in capitals (``lab/worlds/NAME/``) stands for any name
    missing = sorted(p for p in named if not list(REPO.glob(re.sub(r"\b[A-Z][A-Z_]+\b", "*", p).rstrip("/"))))
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_module_the_map_names_resolves() -> None:
    missing = []
    for dotted in sorted(_named_modules(_doc())):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(dotted)
            break
        else:
            missing.append(dotted)
    assert not missing, f"docs/ARCHITECTURE.md names modules or attributes that do not exist: {missing}"


def test_the_map_check_sees_a_missing_path() -> None:
    assert _named_paths("see `agent/run/nowhere.py` and `tools/ssh/`") == {"agent/run/nowhere.py", "tools/ssh/"}
    assert _named_modules("``agent.run.graph`` and `agent.nowhere`") == {"agent.run.graph", "agent.nowhere"}


# ------------------------------------------------------------------------------------ node side effects

NODES = REPO / "agent" / "run" / "nodes"

#: Names a node's code uses that have an effect, by kind. ``rt.x`` is an attribute of the node's
#: ``Runtime``; a bare name is a function or class the node calls. A name that only types or raises
#: (``HostError``) is no effect.
EFFECT_USES: dict[str, set[str]] = {
    "launch": {"ServerSession", "rt.start_session"},
    "host": {
        "rt.host",
        "rt.flags",
        "rt.planner",
        "rt.stop_sessions",
        "ServerSession",
        "read_guards",
        "fingerprint",
        "read_model_config",
        "read_findings",
        "stop_leftover",
    },
}
#: Words by which the map's node table and a node's docstring declare an effect.
EFFECT_WORDS: dict[str, re.Pattern[str]] = {
    "launch": re.compile(r"\blaunch(es)?\b(?! record)", re.I),
    "host": re.compile(r"\bhost\b", re.I),
}


def _uses(path: Path) -> set[str]:
    """The effect-bearing names a module's code uses: called names and ``rt.attr`` accesses."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name):
                used.add(fn.id)
            elif isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id != "rt":
                used.add(fn.attr)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "rt":
            used.add(f"rt.{node.attr}")
    return used


def _node_modules() -> list[Path]:
    return sorted(p for p in NODES.glob("*.py") if p.name != "__init__.py")


def _table_rows() -> dict[str, str]:
    """The map's node table: node name -> its effects column."""
    rows = {}
    for line in _doc().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+`", cells[0]):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def _effects_of_code(path: Path) -> set[str]:
    used = _uses(path)
    return {kind for kind, names in EFFECT_USES.items() if used & names}


def test_every_node_is_in_the_map_and_every_row_is_a_node() -> None:
    assert sorted(_table_rows()) == sorted(p.stem for p in _node_modules())


@pytest.mark.parametrize("path", _node_modules(), ids=lambda p: p.stem)
def test_a_nodes_declared_effects_are_what_its_code_does(path: Path) -> None:
    """The node table's effects column and the module docstring's side effects name every kind of
    effect the node's code has (launch, host), and the table names none it does not have."""
    code = _effects_of_code(path)
    row = _table_rows()[path.stem]
    declared = {kind for kind, word in EFFECT_WORDS.items() if word.search(row)}
    assert declared == code, (
        f"docs/ARCHITECTURE.md says {path.stem}'s effects are {row!r} (kinds {sorted(declared)}), "
        f"its code has {sorted(code)} (it uses {sorted(_uses(path) & set().union(*EFFECT_USES.values()))})"
    )
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    undeclared = sorted(kind for kind in code if not EFFECT_WORDS[kind].search(doc))
    assert not undeclared, f"{path.relative_to(REPO)}'s docstring does not declare its {undeclared} effects"


def test_the_effect_check_sees_a_host_query(tmp_path: Path) -> None:
    sample = tmp_path / "n.py"
    sample.write_text("def node(state, rt):\n    rt.host.run(['ls'])\n    raise HostError('x')\n")
    assert _effects_of_code(sample) == {"host"}
    sample.write_text("def node(state, rt):\n    return ServerSession(rt.transcript)\n")
    assert _effects_of_code(sample) == {"launch", "host"}
    # the planner is built from the flag catalog, which a process that resumed a run reads from the host
    sample.write_text("def node(state, rt):\n    return rt.planner(state).history(state)\n")
    assert _effects_of_code(sample) == {"host"}


# ----------------------------------------------------------------------------------------------- limits


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py") if "site" not in p.parts)


def _registered_commands() -> set[str]:
    """Names of the functions registered as typer commands the call way: ``app.command()(run.run)``."""
    names = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Call)
                and isinstance(node.func.func, ast.Attribute)
                and node.func.func.attr in ("command", "callback")
                and node.args
            ):
                target = node.args[0]
                names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def _exempt(node: ast.FunctionDef | ast.AsyncFunctionDef, commands: set[str]) -> bool:
    """A typer command (decorated ``@app.command``/``@x.callback``, or registered by a call) declares one
    parameter per option."""
    if node.name in commands:
        return True
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute) and target.attr in ("command", "callback"):
            return True
    return False


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    return len([n for n in names if n.arg not in ("self", "cls")])


def _violations() -> tuple[list[str], list[str], list[str]]:
    modules, functions, parameters = [], [], []
    commands = _registered_commands()
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(REPO)
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            modules.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                functions.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
            if _parameters(node) > MAX_PARAMETERS and not _exempt(node, commands):
                parameters.append(f"{rel}:{node.lineno} {node.name}: {_parameters(node)} parameters")
    return modules, functions, parameters


def test_no_module_function_or_parameter_list_is_over_its_limit() -> None:
    modules, functions, parameters = _violations()
    assert not modules, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(modules)
    assert not functions, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(functions)
    assert not parameters, f"functions over {MAX_PARAMETERS} parameters:\n" + "\n".join(parameters)


def _agent_import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the agent modules it imports when it runs (imports under ``if TYPE_CHECKING:`` are for
    the type checker only and load nothing)."""
    return _import_graph(root, ["agent"], runtime_only=True)


def _longest_chain(graph: dict[str, set[str]]) -> list[str]:
    @functools.cache
    def depth(m: str) -> int:
        return max((1 + depth(x) for x in graph[m]), default=0)

    top = max(graph, key=depth)
    chain = [top]
    while graph[chain[-1]]:
        chain.append(max(graph[chain[-1]], key=depth))
    return chain


def test_agent_has_at_most_eight_import_levels() -> None:
    """Levels are the imports in the longest chain of agent modules importing each other."""
    chain = _longest_chain(_agent_import_graph(REPO))
    assert len(chain) - 1 <= MAX_IMPORT_LEVELS, f"{len(chain) - 1} import levels: " + " -> ".join(chain)


def test_the_level_count_follows_the_longest_chain(tmp_path: Path) -> None:
    pkg = tmp_path / "agent"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from agent.b import f\nimport agent.c\n")
    (pkg / "b.py").write_text("def f():\n    import agent.c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import agent.a\n")
    assert _longest_chain(_agent_import_graph(tmp_path)) == ["agent.a", "agent.b", "agent.c"]


# ----- one experiment's data (issue 19: at most five shapes from proposal to conclusion) ---------------

MAX_SHAPES = 5


def _documented_shapes() -> list[tuple[str, str]]:
    """(model, module path) of each numbered item of the map's "One experiment's data" section, in order."""
    text = _doc()
    start = text.index("### One experiment's data")
    end = text.index("\n#", start + 1)
    return re.findall(r"^\d+\. `(\w+)` \(`([\w/]+\.py)`\)", text[start:end], re.M)


def _handoffs() -> list[tuple[str, object, object]]:
    """(where, type received, type handed on) for each place the code passes one experiment's data on,
    read from the annotations (None: that side is not one of the experiment's shapes)."""
    import types
    import typing

    from pydantic import BaseModel

    from agent.domain.evidence import RawEvidence
    from agent.planning.generators import GeneratorInput
    from agent.planning.generators.registry import REGISTRY
    from agent.run.nodes.analyze import classify_outcome
    from agent.run.nodes.execute import run_experiment
    from tools.server import ServerSession

    hints = typing.get_type_hints
    out: list[tuple[str, object, object]] = [
        ("execute.run_experiment", hints(run_experiment)["exp"], hints(run_experiment)["return"]),
        ("ServerSession.result", None, hints(ServerSession.result)["return"]),
        ("RawEvidence.from_launch", hints(RawEvidence.from_launch.__func__)["final"],
         hints(RawEvidence.from_launch.__func__)["return"]),
        ("analyze.classify_outcome", hints(classify_outcome)["evidence"], hints(classify_outcome)["return"]),
    ]
    # What a generator reads of the failing launch: every single-model field of its input but the run's
    # context (the case, the baseline, the host) is one of the shapes (a copy of the outcome is not).
    context = {"Case", "Baseline", "HostFingerprint", "FlagCatalog"}
    for field, t in hints(GeneratorInput).items():
        if typing.get_origin(t) in (typing.Union, types.UnionType):  # X | None -> X
            t = next(a for a in typing.get_args(t) if a is not type(None))
        if isinstance(t, type) and issubclass(t, BaseModel) and t.__name__ not in context:
            out.append((f"GeneratorInput.{field}", t, None))
    # a generator module may import the generators' names for the type checker only
    shared = dict(vars(importlib.import_module("agent.planning.generators")))
    for gen in REGISTRY:
        returned = hints(gen.generate, localns=shared)["return"]
        assert typing.get_origin(returned) is list, f"{gen.__name__}.generate returns {returned}, not a list"
        out.append((f"{gen.__name__}.generate", None, typing.get_args(returned)[0]))
    return out


def _listed_models() -> dict[str, type]:
    """The models the section lists, imported from the modules it names (asserts each is there)."""
    from pydantic import BaseModel

    models: dict[str, type] = {}
    for name, path in _documented_shapes():
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        cls = getattr(module, name, None)
        assert isinstance(cls, type) and issubclass(cls, BaseModel), f"{path} has no model {name}"
        assert cls.__module__ == module.__name__, f"{name} is defined in {cls.__module__}, not {path}"
        models[name] = cls
    return models


def _shape_problems(handoffs: list[tuple[str, object, object]], models: dict[str, type]) -> list[str]:
    """What does not match: a handoff passing a type the list lacks, a listed model no handoff passes."""
    allowed = set(models.values()) | {None}
    problems = [
        f"{where} passes {getattr(t, '__name__', t)}, not one of the listed shapes"
        for where, received, handed in handoffs
        for t in (received, handed)
        if t not in allowed
    ]
    used = {t for _, received, handed in handoffs for t in (received, handed)}
    problems += [f"no handoff passes {name}" for name, cls in models.items() if cls not in used]
    return problems


def test_one_experiments_data_crosses_at_most_five_shapes() -> None:
    """The shapes the map lists are the models the code hands one experiment's data through, no more:
    a generator that returns a model of its own again (``Candidate``), or a generator input holding a
    copy of the outcome (``FailureEvidence``), fails here."""
    models = _listed_models()
    assert 3 <= len(models) <= MAX_SHAPES, list(models)
    assert not _shape_problems(_handoffs(), models)


def test_the_removed_shapes_are_names_of_the_kept_models() -> None:
    """``Candidate`` and ``FailureEvidence`` stay importable for old callers, as the models that replaced
    them, and no module defines a class of either name again."""
    from agent.domain.models import Hypothesis, Outcome
    from agent.planning import generators

    assert generators.Candidate is Hypothesis
    assert generators.FailureEvidence is Outcome
    redefined = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in _sources()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name in ("Candidate", "FailureEvidence")
    ]
    assert not redefined, f"a removed shape is defined again: {redefined}"


def test_the_shape_check_sees_a_model_of_a_generators_own() -> None:
    """A generator returning a model of its own, and a listed model nothing passes, are both reported."""
    from pydantic import BaseModel

    class Proposal(BaseModel):  # what a Candidate model of its own would be
        id: str

    models = _listed_models()
    problems = _shape_problems([*_handoffs(), ("Own.generate", None, Proposal)], models)
    assert problems == ["Own.generate passes Proposal, not one of the listed shapes"]
    problems = _shape_problems(_handoffs(), {**models, "Proposal": Proposal})
    assert problems == ["no handoff passes Proposal"]

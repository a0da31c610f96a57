"""The batch script of ``@task.slurm``: a decorated function's source, its arguments as JSON, and a runner.

The function must be self-contained, as with ``@task.kubernetes``: the job has its source and nothing else
of the DAG file, so every module it uses is imported inside it. :func:`function_source` checks that when
the DAG is parsed (a lambda, a closure, an ``async def``, or a module-level name the function reads are
refused, naming the name and the fix), and :func:`job_script` writes the script::

    #!/bin/sh
    exec python3 - <<'SLURMAPI_PY_<hash>'
    <the function's source>
    <a runner: call it with the JSON arguments, write its JSON return value to $SLURMAPI_RETURN_FILE;
     an exception prints its traceback to stderr and exits 1>
    SLURMAPI_PY_<hash>

``exec`` makes Python the job's process, so Slurm's signals (a TERM at the time limit) reach it; the
result travels as the operator's ``publish_results`` carries any result (:mod:`~airflow_provider_slurmapi.api.results`).
"""

from __future__ import annotations

import ast
import builtins
import dis
import hashlib
import inspect
import json
import textwrap
import types
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

DEFAULT_PYTHON_COMMAND = "python3"
# The function the job script ends with: it calls the user's function and writes its return value.
ENTRY_POINT = "_slurmapi_main"

# Arguments larger than this go to the job as a staged object when the task has a staging location (the
# script, under the API's 1 MB request limit, then carries only its name, size and SHA-256).
STAGED_CALL_BYTES = 64 * 1024
CALL_FILE_VARIABLE = "SLURMAPI_CALL_FILE"

_RUNNER = """
def {entry}():
    import json, os, sys, traceback

    call = json.loads({call})
    try:
        value = {name}(*call["args"], **call["kwargs"])
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        sys.exit(1)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as err:
        print("@task.slurm: the return value of {name}() is not JSON (" + str(err) + "): return a dict, "
              "list, str, number, bool or None", file=sys.stderr)
        sys.exit(2)
    with open(os.environ["SLURMAPI_RETURN_FILE"], "w") as out:
        out.write(text)


{entry}()
"""


def function_source(function: Callable[..., Any]) -> str:
    """The source of ``function`` without its decorators, checked to run on its own (see the module doc)."""
    name = getattr(function, "__name__", "")
    if not isinstance(function, types.FunctionType):
        raise SlurmJobSpecError(
            "python_callable", f"{function!r} is not a function", "Decorate a function defined with def."
        )
    if name == "<lambda>":
        raise SlurmJobSpecError(
            "python_callable", "is a lambda, whose source cannot be sent alone", "Define it with def."
        )
    if inspect.iscoroutinefunction(function) or inspect.isgeneratorfunction(function):
        raise SlurmJobSpecError(
            "python_callable",
            f"{name}() is an async or generator function",
            "Use a plain def that returns its value (run asyncio.run(...) inside it if need be).",
        )
    if name == ENTRY_POINT:
        raise SlurmJobSpecError(
            "python_callable",
            f"is named {ENTRY_POINT}, the name of the job's own entry point",
            "Rename the function.",
        )
    free = function.__code__.co_freevars
    if free:
        raise SlurmJobSpecError(
            "python_callable",
            f"{name}() uses {', '.join(free)} from the function around it (a closure), which the job will not have",
            "Pass the values as arguments of the task instead.",
        )
    missing = sorted(_globals_read(function.__code__) - set(dir(builtins)) - {name})
    if missing:
        raise SlurmJobSpecError(
            "python_callable",
            f"{name}() reads {', '.join(missing)} from its module, which the job will not have (it gets the "
            "function's source only)",
            "Import modules inside the function and pass values as arguments.",
        )
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError) as err:
        raise SlurmJobSpecError(
            "python_callable", f"the source of {name}() cannot be read ({err})", "Define it in a .py file."
        ) from None
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            defaults = [d for d in (*node.args.defaults, *node.args.kw_defaults) if d is not None]
            read = sorted({n.id for d in defaults for n in ast.walk(d) if isinstance(n, ast.Name)} - set(dir(builtins)))
            if read:
                raise SlurmJobSpecError(
                    "python_callable",
                    f"the defaults of {name}() read {', '.join(read)} from its module, which the job will not have",
                    "Write the default values themselves (or None), or pass them as arguments of the task.",
                )
            # the def line onwards: decorators (@task.slurm(...)) are left out
            lines = source.splitlines()[node.lineno - 1 : node.end_lineno]
            return "\n".join(lines) + "\n"
    raise SlurmJobSpecError(  # pragma: no cover - getsource returned the function's own lines
        "python_callable", f"the source of {name}() was not found", "Define it with def in a .py file."
    )


def _globals_read(code: types.CodeType) -> set[str]:
    """The module-level names a code object (and the functions and comprehensions in it) reads."""
    names: set[str] = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(instruction.argval, str):
            names.add(instruction.argval)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _globals_read(constant)
    return names


def python_command(value: object) -> str:
    """Check ``python_command``: the cluster's Python, as a shell command (``python3``, a venv's path...)."""
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\r" in value:
        raise SlurmJobSpecError(
            "python_command",
            f"{value!r} is not a command line",
            "Give the cluster's Python as one line, e.g. 'python3' or '/opt/venvs/train/bin/python'.",
        )
    return value.strip()


def call_json(args: Collection[Any], kwargs: Mapping[str, Any], *, literal_only: bool = False) -> str:
    """The arguments as the job receives them (JSON), or an error naming the one that is not JSON.

    ``literal_only``: when the DAG is parsed, check only the values known then (an XCom or a template
    is resolved when the task runs, and checked then); nothing is returned.
    """
    for label, value in _arguments(args, kwargs):
        if literal_only and not _literal(value):
            continue
        key = _key_not_a_string(value)
        if key is not None:
            raise SlurmJobSpecError(
                label,
                f"has the dict key {key!r}, which JSON would turn into the string {json.dumps(str(key))}",
                "Use string keys, so that the function gets the dict it was given.",
            )
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise SlurmJobSpecError(
                label,
                f"{type(value).__name__} {value!r:.60} cannot be sent to the job as JSON ({err})",
                "Pass JSON values (dict, list, str, int, float, bool, None), e.g. a path instead of an object.",
            ) from None
    if literal_only:
        return ""
    return json.dumps({"args": list(args), "kwargs": dict(kwargs)})


def _key_not_a_string(value: Any) -> Any:
    """The first dict key in ``value`` (at any depth) that is not a string, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    return key
                stack.append(inner)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def _literal(value: Any) -> bool:
    """Whether ``value`` is known when the DAG is parsed: no XCom reference or template inside it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item).__module__.startswith("airflow.") or (isinstance(item, str) and "{{" in item):
            return False
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


def _arguments(args: Collection[Any], kwargs: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    for index, value in enumerate(args):
        yield f"argument {index + 1}", value
    for key, value in kwargs.items():
        yield f"argument {key!r}", value


def job_script(
    source: str, name: str, call: str, command: str = DEFAULT_PYTHON_COMMAND, *, staged: bool = False
) -> str:
    """The batch script that runs ``name`` (defined by ``source``) with ``call``'s arguments: in the script,
    or, ``staged``, from the file ``$SLURMAPI_CALL_FILE``, the checked copy of the object the task staged
    that the job's wrapper fetched before the script (api/staging.py)."""
    reader = f"open(os.environ[{CALL_FILE_VARIABLE!r}]).read()" if staged else repr(call)
    program = (
        f"# @task.slurm: {name}() from the DAG file\nfrom __future__ import annotations\n\n"
        + source
        + _RUNNER.format(call=reader, name=name, entry=ENTRY_POINT)
    )
    end = "SLURMAPI_PY_" + hashlib.sha256(program.encode()).hexdigest()[:16]
    return f"#!/bin/sh\nexec {command} - <<'{end}'\n{program}{end}\n"

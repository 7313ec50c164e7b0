"""Is FlashInfer's decode plan buffer still page-locked? (vllm-double's own judgement.)

Judged independently of the project's patcher: parse site-packages/flashinfer/decode.py with
`ast` (FlashInfer is never imported) and look for assignments to
``self._pin_memory_int_workspace_buffer`` (any suffix) whose value is a ``torch.empty(...)``
call. The file is pinned when any such call passes ``pin_memory=`` with anything but a false
constant (a non-constant expression cannot be proven unpinned, so it counts as pinned).

The FlashInfer folder: env VLLM_DOUBLE_FLASHINFER_DIR, else the ``flashinfer`` package that
``importlib.util.find_spec`` locates (without importing it).
"""

import ast
import importlib.util
import os

BUFFER = "_pin_memory_int_workspace_buffer"


def flashinfer_dir():
    """The FlashInfer package folder, or None when none is installed."""
    forced = os.environ.get("VLLM_DOUBLE_FLASHINFER_DIR")
    if forced:
        return forced
    try:
        spec = importlib.util.find_spec("flashinfer")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _is_buffer_target(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr.startswith(BUFFER)


def _is_empty_call(node) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name == "empty"


def pinned_allocations(source: str, filename: str = "decode.py"):
    """(line, pinned) for each plan-buffer torch.empty allocation in `source`.

    Raises SyntaxError when the file does not parse (FlashInfer would fail to import).
    """
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not any(_is_buffer_target(t) for t in targets) or not _is_empty_call(value):
            continue
        pinned = False
        for kw in value.keywords:
            if kw.arg == "pin_memory":
                pinned = not (isinstance(kw.value, ast.Constant) and not kw.value.value)
        found.append((node.lineno, pinned))
    return found


def decode_state(directory=None) -> dict:
    """{'dir', 'file', 'state': pinned|unpinned|missing|broken, 'allocations', 'error'}."""
    directory = directory if directory is not None else flashinfer_dir()
    result = {"dir": directory, "file": None, "state": "missing", "allocations": [],
              "error": None}
    if not directory:
        result["error"] = "flashinfer is not installed"
        return result
    path = os.path.join(directory, "decode.py")
    result["file"] = path
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        return result
    try:
        allocations = pinned_allocations(source, path)
    except SyntaxError as exc:
        result["state"] = "broken"
        result["error"] = f"SyntaxError: {exc}"
        return result
    result["allocations"] = [{"line": line, "pinned": p} for line, p in allocations]
    result["state"] = "pinned" if any(p for _, p in allocations) else "unpinned"
    return result

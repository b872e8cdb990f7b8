"""Run a figure notebook in this process, the way the figure rules do (``transformer-hessian notebook``).

A notebook run by papermill costs a Jupyter kernel: a second Python process started and connected
over ZeroMQ, on top of papermill's own start (a large share of each small figure job; docs/timings.md,
"Measurements that were code comments"). :func:`execute_notebook` runs the code
cells in an IPython shell inside the calling process instead, with what a kernel gives them: the
notebook's ``parameters`` cell followed by an ``injected-parameters`` cell (the values that
``papermill -p NAME VALUE`` would inject, typed as papermill types them: :func:`parameter_value`),
matplotlib's inline backend, ``display`` and the value of a cell's last expression recorded as
outputs, one namespace for all cells. It writes the executed notebook with its outputs and stops
at the first cell that raises (the notebook is still written, with the error as that cell's
output). The notebooks do not depend on it: each still runs with ``papermill`` as before.
"""

from __future__ import annotations

import io
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import NotebookError

__all__ = ["NotebookError", "execute_notebook", "parameter_value", "parameters_source"]

#: The backend a Jupyter kernel gives matplotlib (ipykernel sets MPLBACKEND to it when unset).
_INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def parameter_value(text: str) -> Any:
    """The value of ``-p NAME TEXT`` as papermill's command line types it: ``True``, ``False`` and
    ``None`` as themselves, then an int, then a float, else the string."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _literal(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def parameters_source(parameters: dict[str, Any]) -> str:
    """The source of the injected-parameters cell: ``# Parameters`` and one ``name = value`` line each."""
    return "".join(["# Parameters\n", *(f"{name} = {_literal(value)}\n" for name, value in parameters.items())])


class _Outputs:
    """The outputs of the running cell, in order (nbformat output dicts), echoed to ``log``."""

    def __init__(self, log: io.TextIOBase) -> None:
        self.log = log
        self.items: list[Any] = []

    def stream(self, name: str, text: str) -> None:
        import nbformat

        self.log.write(text)
        last = self.items[-1] if self.items else None
        if last is not None and last.output_type == "stream" and last.name == name:
            last.text += text
        else:
            self.items.append(nbformat.v4.new_output("stream", name=name, text=text))

    def data(self, output_type: str, data: dict, metadata: dict | None, **extra: Any) -> None:
        import nbformat

        if "text/plain" in data:
            self.log.write(data["text/plain"] + "\n")
        self.items.append(nbformat.v4.new_output(output_type, data=data, metadata=metadata or {}, **extra))


class _Stream(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` of the cells: writes become stream outputs."""

    def __init__(self, outputs: _Outputs, name: str) -> None:
        self.outputs, self.name_ = outputs, name

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            self.outputs.stream(self.name_, text)
        return len(text)


def _shell(outputs: _Outputs):
    """An IPython shell whose displays, results and tracebacks become outputs of the running cell
    (the process's one shell: ``get_ipython()`` returns it, as in a kernel; no history file)."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            outputs.data("display_data", data, metadata)

        def clear_output(self, wait=False):
            outputs.items.clear()

    class Hook(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            outputs.data("execute_result", format_dict, md_dict, execution_count=self.shell.execution_count)

        def finish_displayhook(self):
            pass

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)

        def _showtraceback(self, etype, evalue, stb):
            import nbformat

            name = getattr(etype, "__name__", str(etype))
            outputs.log.write("\n".join(stb) + "\n")
            outputs.items.append(nbformat.v4.new_output("error", ename=name, evalue=str(evalue), traceback=stb))

    config = Config()
    config.HistoryManager.enabled = False
    InteractiveShell.clear_instance()  # a shell of an earlier call in this process
    return Shell.instance(config=config)


def execute_notebook(
    notebook: str | os.PathLike[str],
    executed: str | os.PathLike[str],
    parameters: dict[str, Any],
    log: io.TextIOBase | None = None,
) -> None:
    """Run the code cells of ``notebook`` with ``parameters`` injected and write the executed
    notebook to ``executed`` (atomically; also when a cell raises, then :class:`NotebookError`).
    Cell outputs are also written to ``log`` (default: stderr), as ``papermill --log-output`` does."""
    import nbformat

    from ..util.files import atomic_path

    log = log if log is not None else sys.stderr
    nb = nbformat.read(notebook, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    injected = nbformat.v4.new_code_cell(parameters_source(parameters), metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(tagged[0] + 1 if tagged else 0, injected)

    os.environ.setdefault("MPLBACKEND", _INLINE_BACKEND)  # as in a kernel (ipykernel sets it)
    outputs = _Outputs(log)
    shell = _shell(outputs)
    saved = sys.stdout, sys.stderr
    failed: str | None = None
    start = time.monotonic()
    try:
        sys.stdout, sys.stderr = _Stream(outputs, "stdout"), _Stream(outputs, "stderr")
        for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
            log.write(f"Executing cell {count}\n")
            outputs.items = []
            shell.execution_count = count
            result = shell.run_cell(cell.source, store_history=False)
            cell.outputs, cell.execution_count = outputs.items, count
            error = result.error_before_exec or result.error_in_exec
            if error is not None:
                failed = f"cell {count} raised {type(error).__name__}: {error}"
                break
    finally:
        sys.stdout, sys.stderr = saved
        log.flush()
    nb.metadata["transformer_hessian"] = {
        "runner": "transformer-hessian notebook (in-process IPython shell)",
        "input_path": str(notebook),
        "parameters": parameters,
        "duration": round(time.monotonic() - start, 3),
        "exception": failed is not None,
    }
    Path(executed).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(Path(executed), suffix=".ipynb.tmp") as tmp:
        nbformat.write(nb, tmp)
    if failed is not None:
        raise NotebookError(f"{notebook}: {failed} (the executed notebook, with the traceback: {executed})")

"""Execute every researcher notebook; any cell error (a failed assert included) fails the test.

The kernel is this interpreter (``sys.executable``, the venv's python), named by a
kernelspec written to a temporary directory: a ``python3`` kernelspec elsewhere on
the Jupyter path (a user's, or the system's) can point at another interpreter
without memesh installed. The kernel runs in a scratch directory with no
``MEMESH_*`` variables and no ``memesh.toml``, so the notebooks see the
documented defaults. The notebooks run the in-process core and never start Ray.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
KERNEL_NAME = "memesh-test-python"
CELL_TIMEOUT_S = 300  # a hang guard: the propagation sweep's one cell builds 13 cores with the real model


def _kernel_manager(root: Path) -> AsyncKernelManager:
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "memesh test kernel",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    specs = KernelSpecManager(kernel_dirs=[str(root / "kernels")])
    return AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)


def _kernel_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMESH_") and k != "RAY_ADDRESS"}
    empty = root / "empty-memesh.toml"
    empty.write_text("# no settings: the notebook's own arguments and the defaults apply\n")
    env["MEMESH_CONFIG"] = str(empty)  # an empty TOML source, so no stray memesh.toml applies
    env["IPYTHONDIR"] = str(root / "ipython")  # no user profile or startup files
    (root / "tmp").mkdir()
    env["TMPDIR"] = str(root / "tmp")  # what a failing notebook leaves behind stays under tmp_path
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env


def test_notebooks_found() -> None:
    assert NOTEBOOKS, "notebooks/*.ipynb is empty"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, f"{path.name}: clear the outputs of cells {dirty} before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    client = NotebookClient(
        nb,
        km=_kernel_manager(tmp_path),
        timeout=CELL_TIMEOUT_S,
        startup_timeout=120,
        allow_errors=False,
        record_timing=False,
    )
    # A failing cell raises CellExecutionError naming the cell and its traceback.
    client.execute(cwd=str(workdir), env=_kernel_env(tmp_path))
    executed = [c for c in nb.cells if c.cell_type == "code"]
    assert executed and all(c.get("execution_count") for c in executed), "a code cell did not run"

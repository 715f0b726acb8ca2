"""Shared fixtures. Tests that need a tool carry a marker; in CI a missing tool fails, never skips."""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
from pathlib import Path

import pytest
import torch

import inspector

ROOT = Path(__file__).resolve().parent.parent
_TOOLS = {
    "requires_dot": (lambda: shutil.which("dot") is not None, "graphviz's dot: apt-get install -y graphviz"),
    "browser": (lambda: Path("/usr/bin/chromium").exists(), "Chromium: apt-get install -y chromium"),
    "requires_ray": (lambda: importlib.util.find_spec("ray") is not None,
                     "Ray: pip install 'fold-inspector[ray]' (make setup installs it)"),
}


def pytest_configure(config):
    warnings.filterwarnings("ignore", category=FutureWarning)


def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (make test) each test file is one group, so a worker runs it whole and
    builds its module fixtures (a JupyterLab server, a shared analysis) once; each notebook is a group
    of its own, so the notebooks, the suite's longest tests, spread over the workers."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        group = f"notebook {params['path'].name}" if item.path.name == "test_notebooks.py" and "path" in params \
            else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_runtest_setup(item):
    for marker, (available, install) in _TOOLS.items():
        if item.get_closest_marker(marker) and not available():
            if os.environ.get("CI"):
                pytest.fail(f"CI must provide {install}")
            pytest.skip(f"needs {install}")


@pytest.fixture(scope="session")
def stage_analyses():
    """One upstream analysis per (sample, stage), built once; re-decide with ``with_policy``."""
    cache = {}

    def get(name: str, stage: str) -> inspector.Analysis:
        if (name, stage) not in cache:
            cache[name, stage] = inspector.analyze("sample:" + name, stage=stage, policy="upstream")
        return cache[name, stage]

    return get


def state_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A bit-exact snapshot of every parameter and buffer."""
    return {k: v.detach().clone() for k, v in module.state_dict(keep_vars=True).items()}


def assert_bit_identical(before: dict, module: torch.nn.Module) -> None:
    after = module.state_dict(keep_vars=True)
    assert before.keys() == after.keys()
    for k, v in before.items():
        assert torch.equal(v, after[k].detach()), f"{k} changed"


def flat(outputs) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [t for o in outputs for t in flat(o)]


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite the golden files (tests/goldens/) instead of comparing against them")


@pytest.fixture
def update_goldens(request) -> bool:
    """True under ``pytest --update-goldens``: golden tests rewrite their files instead of comparing."""
    return request.config.getoption("--update-goldens")

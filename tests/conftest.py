"""Shared fixtures. Tests that need a tool carry a marker; in CI a missing tool fails, never skips."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
import torch

import inspector

ROOT = Path(__file__).resolve().parent.parent
# The stages whose graph needs no quantized lowering: the tests over every sample decide these. The lowering stage
# (a quantize and a lowering per model and accelerator) is tested in test_lowering_stage.py and test_samples.py.
NO_LOWERING = tuple(s for s in inspector.STAGES if s != "lowering")
# The samples decided at lowering by the tests (a few seconds each): one the INT flow never folds, one behind a
# view, one folded at tfa that writes state. test_lowering_stage.py runs ExecuTorch's own flow on each too.
# FOLD_INSPECTOR_LOWER_EVERY_SAMPLE=1 runs the same tests on every sample (a quantize and a lowering each per
# accelerator: generated_blocks alone takes minutes), as the lowering stage was checked when it was built.
LOWERING_SAMPLES = (tuple(inspector.samples.names()) if os.environ.get("FOLD_INSPECTOR_LOWER_EVERY_SAMPLE")
                    else ("conv1d_mul", "conv_view_scale", "stateful_conv_mul"))
STORE_ENV = "FOLD_INSPECTOR_STORE"
_RUN_ENV = "FOLD_INSPECTOR_TEST_RUN_STORE"  # the run's shared store, for xdist's workers
_STORE_ROOT: Path | None = None  # this process's stores, removed at its end
_STORE_RUN: Path | None = None  # the store shared by every test of the run
_STORE_TESTS = 0
_TOOLS = {
    "requires_dot": (lambda: shutil.which("dot") is not None, "graphviz's dot: apt-get install -y graphviz"),
    "browser": (lambda: Path("/usr/bin/chromium").exists(), "Chromium: apt-get install -y chromium"),
    "requires_ray": (lambda: importlib.util.find_spec("ray") is not None,
                     "Ray: pip install 'fold-inspector[ray]' (make setup installs it)"),
}


def pytest_configure(config):
    warnings.filterwarnings("ignore", category=FutureWarning)
    # One torch thread per process: the suite runs a process per core (xdist's workers, and their kernels, CLI
    # subprocesses and pool workers), and a second intra-op thread only fights the other process for its core. The
    # inspector's numbers do not depend on it (the pool sets its workers' share the same way); a step loop of small
    # ops was measured up to 100x slower with two threads on a busy 2-core machine. Inherited through the
    # environment by every process the tests start.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # The result store on disk: never the user's. One fresh store for the whole run, made by the first
    # process (xdist's workers, the notebooks' kernels and the CLI's subprocesses inherit its folder), so a
    # lowering or TOSA run of the same question is done once per run and its first use is always real.
    # Tests of the store itself, and tests whose point is that work is done again, are marked
    # ``own_store``: each gets a fresh folder of its own (pytest_runtest_setup).
    global _STORE_ROOT, _STORE_RUN, _STORE_TESTS
    _STORE_TESTS = 0
    if os.environ.get(_RUN_ENV):  # an xdist worker: the controller's run folder
        _STORE_RUN = Path(os.environ[_RUN_ENV])
        _STORE_ROOT = Path(tempfile.mkdtemp(prefix="fold-inspector-own-stores-"))
    else:
        _STORE_ROOT = Path(tempfile.mkdtemp(prefix="fold-inspector-store-"))
        _STORE_RUN = _STORE_ROOT / "run"
        os.environ[_RUN_ENV] = str(_STORE_RUN)
    os.environ[STORE_ENV] = str(_STORE_RUN)
    if config.getoption("dist", "no") == "loadgroup":
        # The groups are handed out in the order of the collection (sorted longest first, below), not by
        # their number of tests (xdist's default), which would leave the longest, the one-test notebooks, last.
        config.option.loadscopereorder = False


# Long tests that share no module fixture with the rest of their file: each is a group of its own, so
# it runs beside its file instead of after it on the same worker. Seconds: the last CI run (2 cores;
# setup and call).
OWN_GROUP = {
    "test_sweep.py::test_interrupted_then_killed_then_resumed_gives_the_uninterrupted_table": 104,
    "test_sweep.py::test_a_worker_killed_in_a_variant_loses_only_that_variant": 30,
    "test_long_session.py::test_a_long_session_stays_small_and_gives_the_same_answers": 187,
    "test_triage.py::test_done_when_repro_of_the_multiple_users_sample": 38,
    "test_triage.py::test_models_the_samples_do_not_have": 54,
    "test_browser.py::test_where_the_error_enters_panel": 81,  # starts a JupyterLab server of its own
    "test_browser.py::test_voila_opens_the_same_ui": 38,
    "test_cli.py::test_compare_json_is_exactly_one_document_and_debug_shows_the_backend_output": 34,
    "test_compare.py::test_workers_give_bit_identical_results_and_name_each_variant": 34,
    # three new processes each (measured here, 2 busy cores)
    "test_store.py::test_compare_in_a_new_process_answers_from_the_store_and_an_edited_helper_is_computed_again": 148,
    "test_store.py::test_a_sweeps_out_folder_does_not_answer_for_a_model_whose_imported_helper_changed": 118,
}
# Files and tests that build the same expensive things in the session fixture ``stage_analyses``: every
# sample at every stage (about 90 s of CPU, 51 s of it the 200-site generated_blocks). A worker process
# builds each analysis once; spread over both workers they were built twice. One group, one worker.
SHARED_GROUPS = {
    "stage analyses": ("test_samples.py", "test_lowering_stage.py", "test_regions.py", "test_rules.py",
                       "test_state_aware_pr.py",
                       "test_triage.py::test_every_sample_site_reproduces_its_decision_without_the_inspector"),
}
_SHARED_OF = {member: group for group, members in SHARED_GROUPS.items() for member in members}
# The other long tests (the same run), only for the order: the longest groups start first.
SECONDS = {
    **OWN_GROUP,
    # in "stage analyses": measured there (-n 2, the analyses built by the group's first tests); CI had 176 and 99
    "test_triage.py::test_every_sample_site_reproduces_its_decision_without_the_inspector": 111,
    "test_sweep.py::test_ray_gives_the_same_table_bit_for_bit": 64,
    "test_sweep.py::test_rows_are_what_analyze_decides": 60,  # with the module's reference sweep
    "test_sweep.py::test_one_worker_gives_the_same_table": 55,
    "test_sweep.py::test_numbers_are_what_compare_measures": 40,
    # in its file's group: the bits and override tests after it get its stateful_wide_scale and stateful_conv_mul
    # variants (steps 3) from compare's cache instead of computing them again; measured alone, on one worker
    "test_quantization.py::test_every_stateful_sample_under_every_quantization": 340,
    # at STEPS since h-speed: the store answers its variants and its bits from the tests before it (6.5 s here
    # against 12.5 s at its own steps=2; 33 s was measured alone): about half the time it had
    "test_quantization.py::test_the_widget_picks_quantizations_answers_fold_or_bits_and_keeps_them_in_sessions": 17,
    "test_notebooks.py::test_notebook_runs[01_quickstart.ipynb]": 30,
    "test_notebooks.py::test_notebook_runs[02_quantization_drift.ipynb]": 206,
    "test_notebooks.py::test_notebook_runs[03_teaching_the_fold.ipynb]": 77,
    "test_notebooks.py::test_notebook_runs[04_triage_an_issue_report.ipynb]": 62,
    "test_notebooks.py::test_notebook_runs[05_write_a_rule.ipynb]": 106,
    "test_notebooks.py::test_notebook_runs[06_sweep_a_rule.ipynb]": 154,
    "test_browser.py::test_quickstart_marker_toggle_and_reference_run": 61,
    "test_browser.py::test_hostile_module_name_is_shown_as_text": 35,
    "test_regions.py::test_toggles_on_regions_equal_the_whole_graph_run[generated_blocks-edge]": 17,
    "test_samples.py::test_decisions_and_reasons_match_expectations[generated_blocks-edge]": 39,  # builds it
    "test_rules.py::test_compare_runs_a_guard_file_and_a_pass_class_file": 35,
    "test_pt2_safety.py::test_every_sample_round_trips[generated_blocks]": 56,
    "test_compare.py::test_a_script_without_a_main_guard_runs_once": 46,
    "test_compare.py::test_ctrl_c_stops_the_workers": 40,
    "test_real_networks.py::test_compare_off_and_upstream_gives_finite_numbers[convnext_block]": 36,
    "test_fuzz.py::test_archives": 35,
    # a new process each, every entry planted once (measured here, both cores busy; 14 s and 11 s idle)
    "test_store.py::test_compare_attribution_bits_and_a_sweeps_out_folder_with_planted_entries_compute_again": 36,
    "test_store.py::test_a_tosa_compare_with_its_entries_planted_computes_them_again": 29,
    # measured in one run of the whole suite on 2026-12-04 (2 cores; a slower machine: 42 minutes): long tests of
    # files whose number of tests alone would hand them out last, where one worker ran them while the other idled
    "test_notebooks.py::test_notebook_runs[07_the_arm_pipeline.ipynb]": 95,
    "test_notebooks.py::test_notebook_runs[08_what_the_fold_buys.ipynb]": 63,
    "test_notebooks.py::test_notebook_runs[09_which_sites_should_fold.ipynb]": 76,
    "test_quantization.py::test_the_simulation_agrees_with_tosa_on_a_corner_of_the_matrix": 159,
    "test_advise.py::test_the_advice_is_the_best_set_among_every_set_measured_directly": 16,  # each of six
    "test_advise.py::test_a_kept_rule_loads_again_in_a_new_process_and_folds_exactly_the_advice": 36,
    "test_advise.py::test_a_sweep_advises_each_model_and_says_what_the_rules_give_up": 26,
    "test_isolation.py::test_idle_workers_and_their_fork_server_stop": 35,
    "test_isolation.py::test_the_fork_server_warms_up_and_keeps_no_thread": 20,
    "test_isolation.py::test_a_worker_killed_in_the_widgets_reference_run_leaves_a_usable_widget": 19,
    "test_isolation.py::test_attribution_in_a_worker_equals_attribution_here_and_survives_a_kill": 16,
    "test_cost.py::test_each_variants_cycles_are_executorchs_own_ethos_u_flow": 20,  # each of four
    "test_journey.py::test_observing_changes_nothing_that_runs": 46,
    "test_pool_priority.py::test_compare_gives_the_longest_variant_a_core_and_the_others_the_background": 38,
    "test_explorer.py::test_model_explorer_shows_a_5000_node_graph_with_the_overlay": 40,
    "test_timm_targets.py::test_the_cli_reads_it": 21,
    # measured in bench/bench_suite.py's run of the whole suite on 2026-12-06 (2 cores, nothing else running):
    # tests added since, which the order above would have handed out last
    "test_notebooks.py::test_notebook_runs[10_the_verdict_on_21234.ipynb]": 78,
    "test_streams.py::test_silero_over_its_speech_on_the_ethos_u85_and_u55": 32,
    "test_verdict.py::test_the_command_lines_reply_on_a_new_stateful_model_is_a_comparisons": 23,
    "test_store.py::test_an_attribution_and_a_bits_in_a_new_process_are_answered_from_the_store": 11,  # each of two
}
OTHER_SECONDS = 1.0  # a test not named above


def _seconds(nodeid: str) -> float:
    """How long a test takes, for the order: its own entry, else its function's (each of its parameters takes
    that long), else ``OTHER_SECONDS``."""
    name = _name(nodeid)
    return SECONDS.get(name, SECONDS.get(name.split("[")[0], OTHER_SECONDS))


def _name(nodeid: str) -> str:
    """``tests/test_x.py::test_y[p]@group`` -> ``test_x.py::test_y[p]``."""
    name = nodeid.rsplit("/", 1)[-1]
    return name[:name.rindex("@")] if name.rfind("@") > name.rfind("]") else name


def group_of(nodeid: str) -> str:
    """The xdist group of a test: its file; a notebook, or a test of ``OWN_GROUP``, on its own; the files
    and tests of a ``SHARED_GROUPS`` entry together."""
    name = _name(nodeid)
    file, _, test = name.partition("::")
    if file == "test_notebooks.py" and test.startswith("test_notebook_runs["):
        return "notebook " + test.removeprefix("test_notebook_runs[").removesuffix("]")
    base = name.split("[")[0]
    if base in OWN_GROUP:
        return base
    return _SHARED_OF.get(base) or _SHARED_OF.get(file) or file


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: pytest -p no:xdist still runs
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (make test) with the groups of ``group_of``. xdist 3.8 reads a test's group
    from a suffix it writes into the test's id, which pytest 9.2 no longer lets it change
    (pytest-dev/pytest-xdist#1386): every test would be a group of its own, each module fixture (the
    sweep every sweep test compares with, a JupyterLab server) built on both workers."""
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return FileGroups(config, log)


def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (make test) each test file is one group, so a worker runs it whole and
    builds its module fixtures (a JupyterLab server, a shared analysis) once; each notebook, and each
    test of ``OWN_GROUP``, is a group of its own, so the suite's longest tests spread over the workers;
    the files of a ``SHARED_GROUPS`` entry share one worker's session fixtures. The groups are handed out longest
    first (``SECONDS``): the short ones fill the gaps at the end."""
    if not getattr(config.option, "loadgroup", False):  # set in the workers of xdist's loadgroup
        return
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(group_of(item.nodeid), []).append(item)
    weight = {g: sum(_seconds(i.nodeid) for i in members) for g, members in groups.items()}
    items[:] = [i for g in sorted(groups, key=lambda g: -weight[g]) for i in groups[g]]


def pytest_unconfigure(config):
    if _STORE_ROOT is not None:
        shutil.rmtree(_STORE_ROOT, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures: a module fixture's compare uses it too
def pytest_runtest_setup(item):
    global _STORE_TESTS
    if item.get_closest_marker("own_store"):
        _STORE_TESTS += 1
        os.environ[STORE_ENV] = str(_STORE_ROOT / f"test-{_STORE_TESTS}")
    else:
        os.environ[STORE_ENV] = str(_STORE_RUN)
    for marker, (available, install) in _TOOLS.items():
        if item.get_closest_marker(marker) and not available():
            if os.environ.get("CI"):
                pytest.fail(f"CI must provide {install}")
            pytest.skip(f"needs {install}")


@pytest.fixture(scope="session")
def stage_analyses():
    """One upstream analysis per (sample, stage), built once; re-decide with ``with_rule``."""
    cache = {}

    def get(name: str, stage: str) -> inspector.Analysis:
        if (name, stage) not in cache:
            cache[name, stage] = inspector.analyze("sample:" + name, stage=stage, rule="upstream")
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


# Goldens are recorded on the main lock's executorch (tests/goldens/KIND/FILE). Another release whose graphs
# differ keeps its own copy of only the files that differ, in tests/goldens/executorch-X.Y/KIND/FILE, read
# instead of the main one when X.Y is installed: each release is compared with what it really draws.
GOLDENS = ROOT / "tests" / "goldens"
MAIN_LOCK = ROOT / "constraints" / "py3.11.txt"  # CI's whole suite runs on it; the goldens were recorded there


def locked_version(lock: Path, package: str) -> str:
    """The version ``lock`` pins ``package`` to (``package==X`` line)."""
    for line in lock.read_text(encoding="utf-8").splitlines():
        name, sep, pinned = line.partition("==")
        if sep and name.strip().lower() == package:
            return pinned.strip()
    raise AssertionError(f"{lock.name} pins no {package}")


def release_of(version: str) -> str:
    """``1.4.0`` -> ``1.4``: the goldens of a release series (its releases share the Arm pipeline around the pass:
    one ``arm_pass_manager.py`` for 1.4.0/1.4.1, another for 1.5.0/1.5.1, docs/stack-facts.md)."""
    return ".".join(version.split(".")[:2])


MAIN_EXECUTORCH = locked_version(MAIN_LOCK, "executorch")
INSTALLED_EXECUTORCH = importlib.metadata.version("executorch")


def release_goldens(version: str) -> Path:
    """The folder of the goldens that differ on ``version``'s release series from the main lock's."""
    return GOLDENS / f"executorch-{release_of(version)}"


@pytest.fixture
def golden(update_goldens):
    """``golden("render/NAME.dot", text)`` compares ``text`` with its golden for the installed executorch: the
    release's own copy if it has one, else the main one. Under ``--update-goldens`` it writes the main file on
    the main lock's release series; on another release it writes the release's copy only where the text differs
    from the main file (and removes a copy that no longer differs), so a release folder holds exactly the files
    whose graphs really differ on that release."""
    on_main = release_of(INSTALLED_EXECUTORCH) == release_of(MAIN_EXECUTORCH)
    release = release_goldens(INSTALLED_EXECUTORCH)

    def check(relative: str, text: str) -> None:
        main, own = GOLDENS / relative, release / relative
        if update_goldens:
            if on_main:
                main.parent.mkdir(parents=True, exist_ok=True)
                main.write_text(text, encoding="utf-8")
            elif main.exists() and main.read_text(encoding="utf-8") == text:
                own.unlink(missing_ok=True)
                for folder in (own.parent, release):  # a release left with no copy has no folder either
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
            else:
                own.parent.mkdir(parents=True, exist_ok=True)
                own.write_text(text, encoding="utf-8")
            return
        path = own if not on_main and own.exists() else main
        shown = path.relative_to(GOLDENS)
        assert path.exists(), f"no golden {shown}: run pytest --update-goldens"
        assert text == path.read_text(encoding="utf-8"), \
            f"{shown} differs on executorch {INSTALLED_EXECUTORCH}: inspect, then pytest --update-goldens"

    return check

"""The suite's pytest plugin: the settings the run itself needs (the order tests are handed
out in, the garbage collector, reports pytest-xdist can send, short temporary folders, yapf's
grammar cache), apart from torch, so that a pytest of its own loads it in a second
(``-p tests.plugin``, tests/test_pytest_config.py). tests/conftest.py takes it in."""
from __future__ import annotations

import gc
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_configure() -> None:
    """yapf (MMEngine's config imports it) writes its grammar cache at its first import in a new
    environment, and publishes the file before its bytes (renamed inside the ``with`` that
    writes it): a second worker importing yapf then read an empty file, an ``EOFError`` that
    ended a fresh venv's run in an INTERNALERROR. Imported here first, by pytest-xdist's
    controller too, before any worker starts."""
    import yapf  # noqa: F401


def pytest_collection_finish() -> None:
    """The objects the collection made (torch's, transformers' and every test module's, some
    500,000) frozen out of the cyclic collector, and its first generation grown from 700 to
    20,000 allocations: full collections scanned them again and again while the compile tests'
    and runners' objects piled up, 8% of the suite's time."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 10)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end runs (``slow``, up to minutes) first, each group in file order: pytest-xdist
    hands tests out in this order, so no worker is left with a long run once the others are done."""
    items.sort(key=lambda item: item.get_closest_marker('slow') is None)


#: Whether a test's call failed (its ``tmp_path`` is kept).
CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """A report's text with a lone surrogate (a path of bytes that are not UTF-8, which the
    tests of such paths print or log) made UTF-8, its surrogates escaped: pytest-xdist sends a
    worker's reports to the controller as UTF-8, and one it cannot encode ended the whole run in
    an INTERNALERROR, without its summary, its failures listed or its slowest tests."""
    outcome = yield
    report = outcome.get_result()
    if report.when == 'call':
        item.stash[CALL_FAILED] = report.failed
    # A passed teardown's report carries the test's captured log too.
    report.sections = [(title, _utf8(content)) for title, content in report.sections]
    if report.failed and _utf8(text := str(report.longrepr)) != text:
        report.longrepr = _utf8(text)


def _utf8(text: str) -> str:
    return text.encode('utf-8', 'backslashreplace').decode('utf-8')


@pytest.fixture
def tmp_path(tmp_path_factory: pytest.TempPathFactory,
             request: pytest.FixtureRequest) -> Iterator[Path]:
    """pytest's ``tmp_path`` under a short name (``t0``, ``t1``, ...), not the test's first 30
    characters: a test run's checkpoint path, which its config gives as the tokenizer's
    ``model_file``, then ran past yapf's 79 columns, and MMEngine's formatting of the config
    searched every way to split it, up to 1.4 s a text (15% of tests/tools' time). Removed once
    the test passes, as ``tmp_path_retention_policy = "failed"`` has pytest's own removed."""
    path = tmp_path_factory.mktemp('t')
    yield path
    if (request.config.getini('tmp_path_retention_policy') == 'failed'
            and not request.node.stash.get(CALL_FAILED, False)):
        shutil.rmtree(path, ignore_errors=True)

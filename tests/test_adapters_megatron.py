"""Megatron-core adapter (`batchproof.adapters.megatron`, docs/cp.md "Adapters").

It runs when `megatron-core` 0.16.1 is installed beside batchproof (the last release for Python
3.11; the framework matrix `.ci/frameworks.toml` builds that venv) and skips cleanly otherwise.
The check must find no new divergence; each known divergence must be confirmed, and removing one
must make the check fail with its shrunk example.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from batchproof import adapters, registry
from batchproof.adapters.runner import check_adapter

NAME = "megatron.cp_rank_bshd"


def test_the_module_imports_without_megatron() -> None:
    """Registering the adapter must not import Megatron (it is imported when the adapter runs)."""
    code = ("import sys; sys.modules['megatron'] = None\n"
            "import batchproof.adapters.megatron as m\n"
            "assert m.CP_RANK_BSHD.framework == 'megatron'\n"
            "assert m.CP_RANK_BSHD.versions == '~=0.16.1'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_adapter_names_its_record_and_documents_its_divergences() -> None:
    import batchproof.adapters.megatron  # noqa: F401 - registers it

    adapter = adapters.get_adapter(NAME)
    info = registry.get(adapter.record)
    assert adapter.record == "cp.shard_bshd" and adapter.distribution == "megatron-core"
    assert adapter.fits("0.16.1") and not adapter.fits("0.19.2")
    assert set(adapter.not_provided) == {"column_index"}
    assert set(adapter.skip) <= set(info.check_names())
    for known in adapter.known:
        assert known.doc and known.upstream, known.name


def test_the_group_megatron_reads() -> None:
    from batchproof.adapters.megatron import RankOfGroup

    group = RankOfGroup(4, 3)
    assert (group.size(), group.rank()) == (4, 3)


@pytest.fixture(scope="module")
def megatron():
    return pytest.importorskip("megatron.core.utils")


def _run(checks=None, without=()):
    adapter = adapters.get_adapter(NAME)
    if without:
        adapter = adapter.without(*without)
    return check_adapter(adapter, checks=checks, max_examples=40, replay_database=False,
                         derandomize=True, report_multiple_bugs=False)


def test_megatron_has_known_divergences_only(megatron) -> None:
    report = _run()
    assert not report.new, [(o.check, o.detail, o.minimal) for o in report.new]
    assert not report.unexplained, report.unexplained
    assert not report.errors, [(o.check, o.detail) for o in report.errors]
    statuses = {o.check: o.status for o in report.outcomes}
    assert statuses["equivalence"] == "pass" and statuses["property:round_trip"] == "pass"
    assert statuses["pin:megatron_bshd_zigzag"] == "pass"
    confirmed = {k["name"] for k in report.known if k["status"] == "confirmed"}
    assert {"empty_batch_raises", "attention_mask_sliced_on_dimension_2"} <= confirmed, \
        report.known


@pytest.mark.parametrize("known, field", [("empty_batch_raises", "RuntimeError"),
                                          ("attention_mask_sliced_on_dimension_2", "")])
def test_without_a_known_divergence_the_check_fails(megatron, known, field) -> None:
    report = _run(["equivalence"], without=(known,))
    assert report.new, f"{known} removed, yet nothing new"
    assert field in report.new[0].detail, report.new[0].detail

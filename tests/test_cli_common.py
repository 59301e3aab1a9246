"""`batchproof.cli.common`, what the commands share: the two errors that end a command with one
line, printing text as it is, importing `--impl module:function`, selecting records and checks
(with the exact messages of a mistake), the search settings of a run, a replayed blob, the
device, the profile, torch's threads, the progress bar, the cores. These tests are the killers
of `batchproof mutate --mutmut --harness cli/common`; none runs a check."""

from __future__ import annotations

import io
import os

import hypothesis
import pytest
import torch
from hypothesis import Phase, settings
from hypothesis.core import encode_failure
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from batchproof import registry
from batchproof.cli import common
from batchproof.cli.common import TargetError, UsageError


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_say_prints_text_as_it_is(monkeypatch) -> None:
    """No rich markup (`[frameworks]` stays), no highlighting (a number or a quote keeps no
    colour even on a terminal), no line cut at the console's width."""
    screen = _Terminal()
    monkeypatch.setattr(common, "console", Console(file=screen, width=40, force_terminal=True,
                                                   color_system="truecolor"))
    text = "pip install 'batchproof[frameworks]' [red]3[/red] checks in 0.5s: " + "x" * 60
    common.say(text)
    common.say("no newline", end="")
    assert screen.getvalue() == text + "\nno newline"


def test_say_prints_an_empty_line_by_default(capsys) -> None:
    common.say()
    assert capsys.readouterr().out == "\n"


def test_import_target_gives_the_function_or_one_line_why_not(tmp_path, monkeypatch,
                                                              cli_state) -> None:
    (tmp_path / "their_module.py").write_text("def f():\n    return 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(__import__("sys").modules, "their_module", raising=False)
    assert common.import_target("their_module:f")() == 7
    with pytest.raises(UsageError) as usage:
        common.import_target("their_module")
    assert str(usage.value) == "--impl 'their_module': expected module:function"
    with pytest.raises(TargetError) as target:
        common.import_target("their_module:g")
    assert str(target.value) == "--impl their_module:g: their_module has no attribute 'g'"


def test_select_records_names_what_was_left_out_and_refuses_one_named(monkeypatch) -> None:
    info = registry.get("trainer.real_rows")
    runnable, left_out = common.select_records(["trainer"])
    assert info in runnable and left_out == []
    monkeypatch.setattr(info, "requires", ("no_such_module_a", "no_such_module_b"))
    runnable, left_out = common.select_records(["trainer"])
    assert left_out == [info] and info not in runnable
    assert [i.name for i in runnable] == [i.name for i in registry.select(["trainer"])
                                          if i is not info]
    with pytest.raises(TargetError) as named:
        common.select_records(["trainer.required_multiple", "trainer.real_rows"])
    assert str(named.value) == f"trainer.real_rows needs {', '.join(info.missing())}"
    assert len(info.missing()) == 2
    everything, _ = common.select_records(None)
    assert len(everything) == len(registry.all_ops()) - 1 - sum(
        bool(i.missing()) for i in registry.all_ops() if i is not info)


def test_select_records_of_an_unknown_op_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as unknown:
        common.select_records(["trainr"])
    with pytest.raises(ValueError) as registry_says:
        registry.select(["trainr"])
    assert str(unknown.value) == f"{registry_says.value} (see `batchproof list records`)"


def test_select_checks_keeps_the_records_order_and_names_an_unknown_one() -> None:
    infos = registry.select(["trainer.required_multiple", "trainer.real_rows"])
    assert common.select_checks(infos, None) == {i.name: i.check_names() for i in infos}
    assert common.select_checks(infos, []) == {i.name: i.check_names() for i in infos}
    multiple, real = (i.check_names() for i in infos)
    wanted = [multiple[-1], "equivalence"]  # asked in another order than the record's
    assert common.select_checks(infos, wanted) == {
        infos[0].name: ["equivalence", multiple[-1]],
        infos[1].name: ["equivalence"] + ([multiple[-1]] if multiple[-1] in real else [])}
    with pytest.raises(UsageError) as unknown:
        common.select_checks(infos, ["equivalence", "equivalance"])
    assert str(unknown.value) == ("unknown check 'equivalance'; did you mean 'equivalence'? "
                                  "(`batchproof list checks`)")
    with pytest.raises(UsageError) as far:
        common.select_checks(infos, ["zzz"])
    assert str(far.value) == "unknown check 'zzz' (`batchproof list checks`)"


@pytest.fixture
def a_profile(cli_state):
    """A loaded profile unlike Hypothesis' defaults in every setting `run_settings` keeps."""
    settings.register_profile("test_cli_common", max_examples=13, derandomize=True,
                              database=None, deadline=None, report_multiple_bugs=True,
                              phases=[Phase.explicit, Phase.generate, Phase.shrink,
                                      Phase.explain])
    settings.load_profile("test_cli_common")


def test_run_settings_is_the_profile_with_one_failure_no_explain(a_profile) -> None:
    chosen = common.run_settings(None)
    assert (chosen.max_examples, chosen.derandomize, chosen.deadline) == (13, True, None)
    assert chosen.report_multiple_bugs is False
    assert tuple(chosen.phases) == (Phase.explicit, Phase.generate, Phase.shrink)
    assert common.run_settings(1).max_examples == 1
    assert common.run_settings(200).max_examples == 200
    assert common.run_settings(200).derandomize is True


@pytest.mark.parametrize("bad", [0, -3])
def test_run_settings_refuses_fewer_than_one_example(bad) -> None:
    with pytest.raises(UsageError) as refused:
        common.run_settings(bad)
    assert str(refused.value) == f"--max-examples must be at least 1, got {bad}"


def test_reproduce_of_a_blob_and_of_none() -> None:
    blob = encode_failure([3, True]).decode()
    assert common.reproduce_of(blob) == (hypothesis.__version__, blob)
    assert common.reproduce_of(None) is None
    assert common.reproduce_of("") is None
    with pytest.raises(UsageError) as bad:
        common.reproduce_of("not-a-blob")
    assert str(bad.value).startswith("--reproduce 'not-a-blob' is not a failure's blob: ")


def test_need_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError) as none:
        common._need_cuda()
    assert str(none.value) == "--device cuda: no CUDA device here"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert common._need_cuda() is None


def test_load_profile(cli_state) -> None:
    assert common._load_profile("ci") == "ci"
    assert settings().max_examples == settings.get_profile("ci").max_examples
    with pytest.raises(UsageError) as unknown:
        common._load_profile("fast")
    assert str(unknown.value).startswith("unknown Hypothesis profile 'fast'; known: ")


def test_one_torch_thread_unless_omp_num_threads_says(monkeypatch) -> None:
    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    common._one_thread_unless_asked()
    assert threads == [1]
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    common._one_thread_unless_asked()
    assert threads == [1]
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # set but empty: as unset
    common._one_thread_unless_asked()
    assert threads == [1, 1]


def test_the_progress_bar_and_where_it_is_drawn(monkeypatch) -> None:
    off = common._progress()
    assert off.live.console is common.console
    assert off.disable == (not common.terminal.animated(common.console))
    screen = Console(file=_Terminal(), force_terminal=True, width=100)
    monkeypatch.setattr(common, "console", screen)
    bar = common._progress()
    assert bar.live.console is screen and not bar.disable
    description, *rest = bar.columns
    assert isinstance(description, TextColumn)
    assert description.text_format == "{task.description:<48}"
    assert [type(c) for c in rest] == [BarColumn, MofNCompleteColumn, TimeElapsedColumn]
    assert bar.live.transient is False


def test_cores_are_those_this_process_may_run_on(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5} if pid == 0 else set(),
                        raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert common._cores() == 3
    monkeypatch.delattr(os, "sched_getaffinity")
    assert common._cores() == 64
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert common._cores() == 1

"""`batchproof list` and `batchproof show` (`batchproof.cli.listing`): what each table lists, row
by row, and what `show` draws of a record's example. The console is a wide one (no cell
wrapped) or, where a colour is the promise, a terminal's. These tests are the killers of
`batchproof mutate --mutmut --harness cli/listing`."""

from __future__ import annotations

import array
import io
from types import SimpleNamespace

import pytest
import torch
from hypothesis import settings
from rich.console import Console
from tensordict import NonTensorData, TensorDict

from batchproof import adapters, placements, profiles, regimes, registry
from batchproof.cli import common, listing, main
from batchproof.cli.common import LISTS, UsageError
from batchproof.compare import assert_identical
from batchproof.ops import OP_MODULES

RED = "\x1b[31m"
MULTIPLE = "trainer.required_multiple"


@pytest.fixture
def screen(monkeypatch):
    """Everything `list` and `show` print, on one wide console (no terminal: no colour)."""
    out = io.StringIO()
    wide = Console(file=out, width=4000)
    monkeypatch.setattr(common, "console", wide)
    monkeypatch.setattr(listing, "console", wide)
    return out


@pytest.fixture
def coloured(monkeypatch):
    """A terminal's console: markup becomes colour."""
    out = io.StringIO()
    wide = Console(file=out, width=400, force_terminal=True, color_system="standard")
    monkeypatch.setattr(common, "console", wide)
    monkeypatch.setattr(listing, "console", wide)
    return out


def _table(out: str) -> tuple[str, list[str], list[list[str]]]:
    """(title, header, rows) of the one table in `out`: the title's lines joined, each cell as
    printed, padding included."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    cells = []
    for line in lines[top + 1:]:
        if line.startswith("└"):
            break
        if line.startswith(("┃", "│")):
            cells.append(line.replace("┃", "│").split("│")[1:-1])
    return " ".join(line.strip() for line in lines[:top]), cells[0], cells[1:]


def _stripped(rows: list[list[str]]) -> list[list[str]]:
    return [[c.strip() for c in row] for row in rows]


def _right(cell: str) -> bool:
    return cell.startswith("  ") and not cell.endswith("  ")


# --------------------------------------------------------------------------- list

def test_list_lists_everything_but_the_regimes_in_order(monkeypatch, capsys) -> None:
    listed = []
    for what in LISTS:
        monkeypatch.setattr(listing, f"_list_{what}", lambda what=what: listed.append(what))
    assert main(["list"]) == 0
    assert listed == [w for w in LISTS if w != "regimes"]
    for what in LISTS:
        listed.clear()
        assert listing.list_things(SimpleNamespace(what=what)) == 0
        assert listed == [what]


def test_list_ops(screen) -> None:
    listing._list_ops()
    title, header, rows = _table(screen.getvalue())
    assert title == "ops (`--op NAME` takes an op or one record, op.function)"
    assert _stripped([header]) == [["op", "records"]]
    assert _stripped(rows) == [[op, ", ".join(i.function for i in registry.all_ops()
                                              if i.op == op)] for op in OP_MODULES]


def test_list_records_names_what_a_record_needs(screen, monkeypatch) -> None:
    info = registry.get("trainer.real_rows")
    monkeypatch.setattr(info, "requires", ("no_such_module_a", "no_such_module_b"))
    listing._list_records()
    title, header, rows = _table(screen.getvalue())
    assert title == "records (one per contract function)"
    assert _stripped([header]) == [["record", "checks", "input forms", "devices",
                                    "what it lays out"]]
    assert _stripped(rows) == [
        [i.name, str(len(i.check_names())), ", ".join(i.forms), ", ".join(i.devices),
         i.doc + (f" [needs {', '.join(i.missing())}]" if i.missing() else "")]
        for i in registry.all_ops()]
    assert any("[needs no_such_module_a (pip install" in row[-1] for row in rows)
    assert all(_right(row[1]) for row in rows if len(row[1].strip()) == 1)
    assert not any(_right(row[0]) for row in rows)  # the other columns to the left
    assert not any(_right(row[2]) for row in rows)


def test_list_checks(screen) -> None:
    listing._list_checks()
    title, header, rows = _table(screen.getvalue())
    assert title == "checks (`--check NAME`)"
    assert _stripped([header]) == [["record", "checks",
                                    "paths checks (`verify`, batchproof's own impl/)"]]
    assert _stripped(rows) == [[i.name, " ".join(i.check_names()), " ".join(i.path_checks())]
                               for i in registry.all_ops()]


class _Adapter(SimpleNamespace):
    def version(self) -> str:
        return self.installed

    def fits(self, version: str) -> bool:
        return version.startswith("0.3")


def test_list_adapters_says_whether_each_fits_what_is_installed(screen, monkeypatch) -> None:
    fake = [_Adapter(name="a.none", framework="fa", record="r.one", target="m:f", versions="",
                     installed="-"),
            _Adapter(name="a.missing", framework="fb", record="r.two", target="m:g",
                     versions="~=0.3.0", installed="not installed"),
            _Adapter(name="a.fits", framework="fc", record="r.three", target="m:h",
                     versions="~=0.3.0", installed="0.3.1"),
            _Adapter(name="a.other", framework="fd", record="r.four", target="m:i",
                     versions="~=0.3.0", installed="0.5.0")]
    monkeypatch.setattr(adapters, "all_adapters", lambda: fake)
    monkeypatch.setattr(adapters, "LOAD_PROBLEMS", ["entry point x failed: ImportError: y",
                                                    "entry point z failed: [no] markup"])
    listing._list_adapters()
    out = screen.getvalue()
    title, header, rows = _table(out)
    assert title == ("adapters (`batchproof check --impl FRAMEWORK`; entry-point group "
                     "'batchproof.adapters')")
    assert _stripped([header]) == [["adapter", "framework", "record", "target", "fits",
                                    "installed"]]
    assert _stripped(rows) == [["a.none", "fa", "r.one", "m:f", "any", "-"],
                               ["a.missing", "fb", "r.two", "m:g", "~=0.3.0", "not installed"],
                               ["a.fits", "fc", "r.three", "m:h", "~=0.3.0", "0.3.1 (yes)"],
                               ["a.other", "fd", "r.four", "m:i", "~=0.3.0", "0.5.0 (no)"]]
    assert out.endswith("\nentry point x failed: ImportError: y\n"
                        "entry point z failed: [no] markup\n")


def test_list_placements_says_which_run_here(screen, monkeypatch) -> None:
    monkeypatch.setattr(placements, "available", lambda device="cpu": ["cpu", "generic"])
    listing._list_placements()
    title, header, rows = _table(screen.getvalue())
    assert title == "placements (`verify --placement NAME`; default: every one available)"
    assert _stripped([header]) == [["placement", "what runs", "paths it may run", "here"]]
    assert _stripped(rows) == [
        ["kernel", placements.PLACEMENTS["kernel"], "numba, cpu",
         "no: pip install 'batchproof[kernels]'"],
        ["cpu", placements.PLACEMENTS["cpu"], "cpu", "default"],
        ["generic", placements.PLACEMENTS["generic"], "none", "yes"],
        ["triton", placements.PLACEMENTS["triton"], "triton",
         "no: pip install 'batchproof[triton]'"]]


def test_list_profiles(screen, monkeypatch) -> None:
    monkeypatch.setattr(profiles, "default_profile", lambda: "nightly")
    listing._list_profiles()
    title, header, rows = _table(screen.getvalue())
    assert title == "Hypothesis profiles (`--profile NAME`; default now: nightly)"
    assert _stripped([header]) == [["profile", "examples", "derandomized", "database",
                                    "shrinks"]]
    assert _stripped(rows) == [
        [name, str(p.max_examples), "yes" if p.derandomize else "no",
         "none" if p.database is None else "local .hypothesis/",
         "yes" if "shrink" in {phase.name for phase in p.phases} else "no"]
        for name, p in profiles.PROFILES.items()]
    # each kind of profile is there: the table is not one answer for all
    assert {tuple(r[2:]) for r in _stripped(rows)} >= {("yes", "none", "no"),
                                                       ("no", "local .hypothesis/", "yes")}
    assert {"mutation", "nightly"} <= {r[0] for r in _stripped(rows)}
    assert settings.get_profile("mutation").max_examples == profiles.PROFILES[
        "mutation"].max_examples


def _fake_regimes(monkeypatch) -> list:
    asked = []
    monkeypatch.setattr(regimes, "default_examples", lambda: 240)
    monkeypatch.setattr(regimes, "records", lambda: ["r.one", "r.two"])
    hits = {"r.one": {"empty": 17, "rare": regimes.MIN_HITS - 1},
            "r.two": {"wide": regimes.MIN_HITS}}
    monkeypatch.setattr(regimes, "coverage",
                        lambda record, examples: asked.append((record, examples)) or hits[record])
    return asked


def test_list_regimes_counts_each_regimes_examples(screen, monkeypatch) -> None:
    asked = _fake_regimes(monkeypatch)
    listing._list_regimes()
    title, header, rows = _table(screen.getvalue())
    assert title == ("regimes: what each strategy promises to draw, and in how many of 240 "
                     f"examples (four ci budgets) it does (batchproof.regimes; fewer than "
                     f"{regimes.MIN_HITS} fails tests/test_regimes.py)")
    assert _stripped([header]) == [["record", "regime", "examples"]]
    assert _stripped(rows) == [["r.one", "empty", "17"], ["r.one", "rare",
                                                          str(regimes.MIN_HITS - 1)],
                               ["r.two", "wide", str(regimes.MIN_HITS)]]
    assert all(_right(row[2]) for row in rows) and not _right(rows[0][0])
    assert asked == [("r.one", 240), ("r.two", 240)]


def test_list_regimes_marks_those_drawn_too_rarely_in_red(coloured, monkeypatch) -> None:
    _fake_regimes(monkeypatch)
    listing._list_regimes()
    out = coloured.getvalue()
    assert f"{RED}{regimes.MIN_HITS - 1}" in out
    assert f"{RED}{regimes.MIN_HITS}" not in out and f"{RED}17" not in out


# --------------------------------------------------------------------------- show

def test_show_draws_the_example_its_picture_and_its_tensors(screen) -> None:
    info = registry.get("rl_batch.build_rl_batch")
    assert listing.show(SimpleNamespace(op=[info.name])) == 0
    lines = screen.getvalue().splitlines()
    output = info.example.call(info.reference)
    assert lines[0].startswith("─") and f" {info.name} — {info.doc} " in lines[0]
    assert lines[1] == f"input: {info.example.short(200)}"
    picture = [line for family, rows in info.picture(output).items()
               for line in [f"{family}:", *(f"  row {i}  {row}" for i, row in enumerate(rows))]]
    assert lines[2:2 + len(picture)] == picture
    assert lines[2 + len(picture)] == "  (. pad, p prompt, r response)"
    assert lines[3 + len(picture)].startswith("TensorDict(")
    values = {key: output.get_non_tensor(key) if output.is_non_tensor(key)
              else output.get(key).tolist() for key in output.keys()}
    assert lines[-len(values):] == [f"{key} = {value}" for key, value in values.items()]
    assert {type(v) for v in values.values()} >= {list, int, str}  # tensors and non-tensors


def test_show_prints_what_a_record_draws_of_itself(screen, monkeypatch) -> None:
    info = registry.get("nesting.nest_by_mask")
    assert listing.show(SimpleNamespace(op=[info.name, MULTIPLE])) == 0
    out, other = screen.getvalue().split(f" {MULTIPLE} — ")  # the next record shown too
    first, drawn = out.split("\n", 1)
    assert first.startswith("─") and f" {info.name} — {info.doc} " in first
    drawing = [f"input: {info.example.short(200)}",
               *info.show(info.example, info.example.call(info.reference))]
    assert drawn.rsplit("\n", 1)[0] == "\n".join(drawing)  # not the tensors: its own drawing
    handed = []
    monkeypatch.setattr(info, "show", lambda example, output: handed.append(
        (example, output)) or ["drawn"])
    screen.truncate(0), screen.seek(0)
    assert listing.show(SimpleNamespace(op=[info.name])) == 0
    ((example, output),) = handed
    assert example is info.example
    assert_identical(info.example.call(info.reference), output)  # the reference's output


def test_show_of_an_output_that_is_no_tensordict(screen) -> None:
    info = registry.get("trainer.required_multiple")
    assert listing.show(SimpleNamespace(op=[info.name])) == 0
    output = info.example.call(info.reference)
    assert screen.getvalue().splitlines()[1:] == [f"input: {info.example.short(200)}",
                                                  str(output), repr(output)]


def test_show_skips_records_without_an_example_or_a_module(screen, monkeypatch) -> None:
    chunk, pad = registry.get("nesting.chunk_nested"), registry.get("trainer.pad_to_multiple")
    assert chunk.example is None and pad.example is not None
    monkeypatch.setattr(pad, "requires", ("no_such_module_a", "no_such_module_b"))
    after = "trainer.broadcast_stepwise_advantages"  # after pad_to_multiple in the registry
    assert listing.show(SimpleNamespace(op=[chunk.name, pad.name, "trainer.real_rows",
                                            after])) == 0
    first, *rest = screen.getvalue().splitlines()
    assert first == f"{pad.name}: not shown, needs {', '.join(pad.missing())}"
    assert f" {after} — " in rest[0]  # the records after it are shown


def test_show_refuses_what_it_cannot_show() -> None:
    with pytest.raises(UsageError) as nothing:
        listing.show(SimpleNamespace(op=["nesting.chunk_nested", "trainer.real_rows"]))
    assert str(nothing.value) == ("no record of ['nesting.chunk_nested', 'trainer.real_rows'] "
                                  "has an example to show")
    with pytest.raises(UsageError) as unknown:
        listing.show(SimpleNamespace(op=["trainr"]))
    with pytest.raises(ValueError) as registry_says:
        registry.select(["trainr"])
    assert str(unknown.value) == f"{registry_says.value} (see `batchproof list records`)"


def test_the_tensors_of_an_output_as_lists_and_jagged_ones_as_they_are(screen) -> None:
    jagged = torch.nested.nested_tensor([torch.tensor([1, 2]), torch.tensor([3])],
                                        layout=torch.jagged)
    output = TensorDict({"ids": torch.tensor([[1, 2], [3, 4]]), "note": NonTensorData("left"),
                         "rows": jagged}, batch_size=[2])
    output["numbers"] = NonTensorData(array.array("i", [5, 6]))  # tolist, no is_nested
    listing._print_tensors(output)
    assert screen.getvalue().splitlines()[:2] == ["ids = [[1, 2], [3, 4]]", "note = left"]
    assert screen.getvalue().splitlines()[2].startswith("rows = NestedTensor(")
    assert screen.getvalue().splitlines()[-1] == "numbers = [5, 6]"
    screen.truncate(0), screen.seek(0)
    listing._print_tensors([1, "two"])
    assert screen.getvalue() == "[1, 'two']\n"

"""mutmut survivors of batchproof's own harness modules (`batchproof mutate --mutmut --harness
MODULE`) that no test can kill, documented like impl's (see the package docstring).

Each entry is about one `harness/<module>.py` that `HARNESS_KILLERS` names
(tests/test_mutmut_driver.py checks it). The reasons say why the mutant behaves as the original on
every input the harness can meet: a value only read where the mutant agrees, a branch its callers
never reach with the other operand, a tolerance no difference of two floats can equal.
"""

from batchproof.mutation.equivalents import Equivalent

COMPARE = "harness/compare.py"
ADAPTERS = "harness/adapters/__init__.py"
CHECKS = "harness/checks.py"
BRANCH_COVERAGE = "harness/cli/branch_coverage.py"
LISTING = "harness/cli/listing.py"
FUZZ = "harness/cli/fuzz.py"
CHECK = "harness/cli/check.py"
PARSER = "harness/cli/parser.py"
VERIFY = "harness/cli/verify.py"
REGIMES = "harness/regimes.py"
HOST_READS = "harness/perf/host_reads.py"
SCOPE = "harness/adapters/scope.py"
DERANDOMIZED_NO_DATABASE = ("derandomize=True implies database=None: Hypothesis drops a "
                            "profile's database itself (settings(derandomize=True).database is "
                            "None under any profile)")
RUNNER = "harness/adapters/runner.py"
TARGET = "harness/mutation/target.py"
RICH_LEFT = ("rich justifies a cell by a name it does not know (`XXleftXX`, `LEFT`) as by "
             "default, which is to the left: the table is drawn the same")
ON_CPU_DEVICE = ("CPU-equivalent: the dropped or None `device` defaults to (or, on the CPU path, "
                 "acts as) 'cpu', the device every CPU test runs on; a run on CUDA "
                 "(tests/test_registry.py::test_impl_on_cuda, gpu marker) passes another")
NO_ROWS_THERE = ("`_row_report` draws a row only for a tensor difference under a key both "
                 "TensorDicts hold as tensors (a key-set, batch-size or non-tensor difference "
                 "returns with no rows), so here the key is present and holds a tensor")

EQUIVALENT: tuple[Equivalent, ...] = (
    # ------------------------------------------------------------------ harness/compare.py
    Equivalent(COMPARE, "_diff_tensor",
               r'_diff_tensor\(expected\.offsets\(\), actual\.offsets\(\), f"\{path\}\.offsets'
               r'\(\)", allow_device\)',
               r'f"\{path\}\.offsets\(\)", None\)',
               "CPU-equivalent: the offsets are int64 (allow_device's NaN rule never applies to "
               "them), so None acts as False except on a jagged output on another device than "
               "its oracle (allow_device=True, a CUDA candidate): not run on this machine"),
    Equivalent(COMPARE, "_diff_tensor",
               r"for w in where if int\(w\[0\]\) == r\}\) for r in rows\[:2\]\}",
               r"for r in rows\[:3\]\}",
               "the columns of a third mismatching row are never read: assert_identical draws "
               "rows[:2] only (tests/test_compare.py::test_at_most_two_rows_are_drawn)"),
    Equivalent(COMPARE, "_diff_tensordict",
               r"^(e|a)_val = (expected|actual)\.get_non_tensor\(key\) if (e|a)_nt else",
               r"if \((e|a)_nt\) or True else",
               "TensorDict.get_non_tensor returns a tensor or TensorDict entry itself (the same "
               "object as get), so asking it for every key reads the same values"),
    Equivalent(COMPARE, "_picture_row",
               r"key not in td\.keys\(\) or td\.is_non_tensor\(key\):$",
               r"key not in td\.keys\(\) and td\.is_non_tensor\(key\):$", NO_ROWS_THERE),
    Equivalent(COMPARE, "_picture_row",
               r"^width = tensor\.shape\[-1\] if tensor\.dim\(\) == 2 else tensor\.shape\[1\]$",
               r"^width = tensor\.shape\[(\+1|-1)\] if \(?tensor\.dim\(\) == 2\)?( and False)? "
               r"else tensor\.shape\[1\]$",
               "for a 2-D tensor shape[-1] is shape[1] (= shape[+1]): the same width whichever "
               "branch reads it"),
    Equivalent(COMPARE, "_row_report",
               r'^key = path\.split\("\."\)\[0\]\.split\("\["\)\[0\]$',
               r'^key = path\.split\("(XX\.XX|\.)"\)\[0\]\.split\("(XX\[XX|\[)"\)\[0\]$',
               "the key only picks the tensor to picture: a path with a '.' is under a nested "
               "TensorDict or is a jagged tensor's .offsets()/.values(), and one with a '[' is an "
               "element of a list or tuple output; each has no picture whether the key is cut "
               "there (a TensorDict, a nested tensor, no TensorDict) or not (no such key)"),
    Equivalent(COMPARE, "assert_logprobs_close",
               r"if max_abs > max_tol or \(mean_tol is not None and mean_abs > mean_tol\):$",
               r"if max_abs (>= max_tol or \(mean_tol is not None and mean_abs > mean_tol|"
               r"> max_tol or \(mean_tol is not None and mean_abs >= mean_tol)\):$",
               "> and >= differ only at |Δ| exactly equal to a tolerance (1e-5, 2e-2, 2e-3), "
               "none of which is a binary fraction: a difference of two float32/bf16/fp16 "
               "logprobs (computed exactly in float64) has too few significant bits to equal "
               "one, and no drawn case's mean lands on one"),

    # ------------------------------------------------------------ harness/adapters/__init__.py
    Equivalent(ADAPTERS, "KnownDivergence.describes",
               r"return issubclass\(shown\.exception, self\.raises\) if self\.raises else False",
               r"if \(self\.raises\) or True else False",
               "with no `raises` the mutant asks issubclass(exception, ()), which is False: the "
               "same answer as the original's else branch"),
    Equivalent(ADAPTERS, "_guarded",
               r'package = adapter\.target\.partition\(":"\)\[0\]',
               r'package = adapter\.target\.rpartition\(":"\)\[0\]',
               "a target is `module:function` with one colon (a second one makes load_target "
               "fail before any candidate is built: tests/test_adapter_triage.py::"
               "test_load_target_imports_the_function_or_says_why_not), and with one colon "
               "partition and rpartition agree"),
    Equivalent(ADAPTERS, "_raised_in",
               r'name = trace\.tb_frame\.f_globals\.get\("__name__", ""\)',
               r'name = trace\.tb_frame\.f_globals\.get\("__name__", "XXXX"\)',
               "a frame whose globals have no __name__ (exec'd code) is then named 'XXXX' instead "
               "of '': it still belongs to no framework package (none is named XXXX, and a "
               "package is never '': a target needs a module before its colon)"),
    Equivalent(ADAPTERS, "load_adapter_file",
               r"name = f\"batchproof_adapter_file_\{abs\(hash\(str\(file\.resolve\(\)\)\)\)\}\"",
               r"hash\((str\()?None\)?\)",
               "the module name only labels the module object (it is never put in sys.modules), "
               "so one name for every file registers the same adapters from each"),

    # ------------------------------------------------------------------ harness/checks.py
    Equivalent(CHECKS, "*", r"\b(_search|check_equivalence|check_pin)\(.*\bdevice\b",
               r"^(body = lambda case: check_equivalence\(info, case, call, \)|"
               r"check_equivalence\(info, case, candidate, \))$", ON_CPU_DEVICE),
    Equivalent(CHECKS, "run_check", r"check_pin\(info, pin\.name, call, device, ",
               r"check_pin\(info, pin\.name, call, messages=", ON_CPU_DEVICE),
    Equivalent(CHECKS, "*", r"_call_on\(info, (case|formed), (formed|candidate), device\)",
               r"_call_on\(None, ", "CPU-equivalent: _call_on reads the record only to move a "
               "case to another device; on the CPU it calls the candidate without it"),
    Equivalent(CHECKS, "check_error_parity",
               r'^case = bad_input_on\(info, bad\.case, device\) if device != "cpu" else bad\.case$',
               r'^case = bad_input_on\((None, bad\.case, device|info, None, device|info, bad\.case, '
               r'None|bad\.case, device|info, device|info, bad\.case, )\) if device != "cpu"|'
               r'if \(device != "cpu"\) and False|if device != "(XXcpuXX|CPU)"|'
               r'if \(device != "cpu"\) or True|if device == "cpu"',
               "CPU-equivalent: on the CPU the bad case is already where the reference saw it; "
               "bad_input_on(info, case, 'cpu') moves nothing and passes device='cpu' only to a "
               "function that takes it, whose default is the CPU (bad_input_on itself is killed "
               "by tests/test_checks.py::test_a_bad_input_moves_to_the_device_with_its_defect_"
               "and_device_argument; the device branch runs on CUDA in tests/test_registry.py)"),
    Equivalent(CHECKS, "_as_on_cpu", r'^if device == "cpu":$', r'^if device == "(XXcpuXX|CPU)":$',
               "on the CPU the substitution that follows renames 'cpu' to 'cpu': the message is "
               "returned unchanged either way"),
    Equivalent(CHECKS, "_headline",
               r'split\("\\n", 1\)\[0\]\.split\(":", 2\)\[:2\]',
               r'split\("\\n", ?[12]?\)\[0\]\.split\(":", ?[23]?\)\[:2\]\)$',
               "the first line, and its first two ':'-fields, are the same whether the string is "
               "split once, twice or fully there"),
    Equivalent(CHECKS, "_run_given",
               r'and not hasattr\(failure, "exceptions"\):$',
               r'and not hasattr\((None, "exceptions"|failure, "XXexceptionsXX"|failure, '
               r'"EXCEPTIONS")\):$',
               "a group of failures (report_multiple_bugs) tried without a keyword fails with one "
               "exception, never a group: _same_failure is False for each trial, nothing is "
               "dropped and no note is added, as when the group is skipped"),
    Equivalent(CHECKS, "_run_given",
               r"version, blob\.encode\(\) if isinstance\(blob, str\) else blob\)\(wrapped\)",
               r"version, blob\.encode\(\) if \(isinstance\(blob, str\)\) and False else blob\)",
               "hypothesis.reproduce_failure decodes a str blob as it does its bytes (tests/"
               "test_checks.py::test_a_failures_blob_replays_it_and_a_fixed_one_says_so replays "
               "both)"),
    Equivalent(CHECKS, "_run_given",
               r"settings = hypothesis\.settings\(settings or hypothesis\.settings\(\),",
               r"^settings = (None|hypothesis\.settings\(None,|hypothesis\.settings\(settings "
               r"and hypothesis\.settings\(\),|hypothesis\.settings\(verbosity=hypothesis\."
               r"Verbosity\.quiet\))$",
               "a replay runs the one example its blob encodes, quietly either way: of the "
               "check's settings it could use only the verbosity, which the original forces to "
               "quiet (tests/test_checks.py::test_a_verbose_replay_is_still_quiet kills the "
               "mutants that keep a verbose one)"),
    Equivalent(CHECKS, "bad_input_on", r"^takes_device = False$", r"^takes_device = None$",
               "None and False are both false: no device argument is passed either way"),

    # ------------------------------------------------------- harness/cli/branch_coverage.py
    Equivalent(BRANCH_COVERAGE, "_file", r"\{'exit' if b < 0 else b\}",
               r"\{'exit' if b (<= 0|< 1) else b\}",
               "coverage.py names a branch's destination by its line (1 or more) or, for an exit "
               "from a code object, by the negative of the object's first line: never 0, where "
               "< 0, <= 0 and < 1 alone differ"),
    Equivalent(BRANCH_COVERAGE, "finish", r'path = Path\(folder\) / "coverage\.json"',
               r'path = Path\(folder\) / "(XXcoverage\.jsonXX|COVERAGE\.JSON)"',
               "the name of coverage.py's JSON report in a temporary folder of its own, written "
               "and read back under that one name, then deleted: no caller sees it"),

    # ------------------------------------------------------------- harness/cli/listing.py
    Equivalent(LISTING, "*", r'justify="right" if column == "(checks|examples)" else "left"\)',
               r'else "(XXleftXX|LEFT)"\)$', RICH_LEFT),
    Equivalent(LISTING, "_print_tensors",
               r"value = output\.get_non_tensor\(key\) if output\.is_non_tensor\(key\) else",
               r"if \(output\.is_non_tensor\(key\)\) or True else",
               "TensorDict.get_non_tensor returns a tensor entry itself (the same object as "
               "get), so asking it for every key prints the same values"),
    Equivalent(LISTING, "_print_tensors", r'value, "is_nested", False\) else value$',
               r'value, "is_nested", None\) else value$',
               "a value without is_nested is not nested: None and False are both false"),

    # ---------------------------------------------------------------- harness/cli/fuzz.py
    Equivalent(FUZZ, "print_fuzz_counts",
               r'justify="left" if column in \("record", "check"\) else "right"\)',
               r'justify="(XXleftXX|LEFT)" if column in', RICH_LEFT),

    # --------------------------------------------------------------- harness/cli/check.py
    Equivalent(CHECK, "check", r'if getattr\(args, "liveness", False\):$',
               r'if getattr\(args, "liveness", None\):$',
               "a namespace without `liveness` (verify's) runs the checks: None and False are "
               "both false"),

    # -------------------------------------------------------------- harness/cli/parser.py
    Equivalent(PARSER, "version_text", r"\{of\('[a-z]+'\)\}",
               r"\{of\('(BATCHPROOF|TORCH|HYPOTHESIS|TENSORDICT|NUMBA|TRANSFORMERS|MUTMUT)'\)\}",
               "importlib.metadata looks a distribution's name up case-insensitively (PEP 503 "
               "normalization): TORCH is torch's version"),
    Equivalent(PARSER, "description", r'cli\.__doc__\.partition\("\\nThe package:"\)\[0\]$',
               r'cli\.__doc__\.rpartition\("\\nThe package:"\)\[0\]$',
               "the package's docstring has one paragraph starting `The package:`: split at its "
               "first or its last occurrence, the text before it is the same"),

    # -------------------------------------------------------------- harness/cli/verify.py
    Equivalent(VERIFY, "_finish_coverage", r'justify="left" if column in \("file", "branches not',
               r'justify="(XXleftXX|LEFT)" if column in', RICH_LEFT),
    Equivalent(VERIFY, "_print_summary", r'^else "left"\)$', r'^else "(XXleftXX|LEFT)"\)$',
               RICH_LEFT),  # the second line of the columns' `justify=... if ... else "left"`
    Equivalent(VERIFY, "_verify_one",
               r"result = CheckResult\(info\.op, info\.function, check, Verdict\.PASS, 0, 0\.0, "
               r"args\.device,",
               r"Verdict\.PASS, (None, 0\.0|0, None|1, 0\.0|0, 1\.0), args\.device,",
               "placeholders: the result's examples and seconds are set from the check's stats "
               "and clock (`result.examples, result.seconds = ...`) after the check, raised or "
               "not, before anything reads them"),
    Equivalent(VERIFY, "_print_summary", r'\(\{r\.status\}\)", style="red"\)$',
               r'\(\{r\.status\}\)", style="RED"\)$',
               "rich reads a colour's name case-insensitively: RED is the style red"),

    # ------------------------------------------------------------------- harness/regimes.py
    Equivalent(REGIMES, "_collate_sft", r"return total > 2\*\*24 and total % 2 == 1$",
               r"return total >= 2\*\*24 and total % 2 == 1$",
               "2**24 is even: an odd total is never equal to it, so > and >= agree"),
    Equivalent(REGIMES, "_collate_sft", r'"cancellation_2_53": magnitude\("cancellation"\),$',
               r'"cancellation_2_53": magnitude\((None|"XXcancellationXX"|"CANCELLATION")\),$',
               "cancellation is `magnitude`'s last branch, the fall-through after the other "
               "kinds' tests: any name that is none of them reaches it"),
    Equivalent(REGIMES, "_micro_batches", r"lambda c: split_in\(c, range\(2, 5\)\),$",
               r"lambda c: split_in\(c, range\(2, \d+\)\),$",
               "the bound `-(-total // n) + 2` falls as the count n grows and the other bound "
               "(the largest group) does not depend on n: a budget is within the bound of some "
               "count of the range exactly when it is within count 2's"),
    Equivalent(REGIMES, "_pack_varlen",
               r"return max\(\(p \+ r for p, r in _pairs\(call\)\), default=0\)$",
               r"return max\(\(p \+ r for p, r in _pairs\(call\)\), default=1\)$",
               "the default is read only when there is no sample: then the total and the tail "
               "are 0, and neither tail regime holds on a tail of 0 (`1 <= tail`, `tail > "
               "longest` with longest 0 or 1)"),
    Equivalent(REGIMES, "_pad_to_multiple",
               r"return value if isinstance\(value, int\) and value > 0 else 0$",
               r"return value if isinstance\(value, int\) and value >= 0 else 0$",
               "a multiple of 0 is returned as 0 on either branch"),
    Equivalent(REGIMES, "_pad_to_multiple",
               r'"pads_rows": lambda c: multiple\(c\) > 0 and rows\(c\) % multiple\(c\) != 0,',
               r'"pads_rows": lambda c: multiple\(c\) > 1 and rows\(c\) % multiple\(c\) != 0,',
               "a multiple of 1 divides every row count: `rows % 1 != 0` never holds"),
    Equivalent(REGIMES, "length_regimes",
               r"len\(set\(found\)\) == 1 and found\[0\] != \(0, 0\)$",
               r"len\(set\(found\)\) == 1 and found\[1\] != \(0, 0\)$",
               "checked only after `len(found) >= 2` and `len(set(found)) == 1`: found[1] is "
               "found[0]"),
    Equivalent(REGIMES, "coverage",
               r"settings\(max_examples=budget, derandomize=True, database=None, deadline=None,",
               r"settings\(max_examples=budget, derandomize=True, deadline=None,",
               "derandomize=True implies database=None: Hypothesis drops a profile's database "
               "itself (settings(derandomize=True).database is None under any profile)"),
    Equivalent(REGIMES, "coverage", r"phases=\[Phase\.generate\], suppress_health_check",
               r"^suppress_health_check=list\(HealthCheck\)\)$",
               "without a failure only the generate phase draws here: no @example (explicit), "
               "no database (reuse, derandomized), no target() call (target), and `count` never "
               "raises (the regimes read inputs through Call, which never raises): no shrink"),

    # ------------------------------------------------------------ harness/perf/host_reads.py
    Equivalent(HOST_READS, "_site", r"for depth in range\(len\(stack\) - 1, -1, -1\):$",
               r"for depth in range\(len\(stack\) - (2, -1|1, \+1|1, -2), -1\):$",
               "the innermost frame is `_site`'s own and the outermost the interpreter's entry "
               "(runpy, pytest), neither ever under a root: starting one frame further out, "
               "stopping before the outermost, or reaching the innermost again finds the same "
               "innermost root frame"),
    Equivalent(HOST_READS, "_FunctionReads.__torch_function__",
               r'name = getattr\(func, "__name__", ""\)$',
               r'name = getattr\(func, "__name__", (None|"XXXX")?\)$',
               "the default names a function without `__name__`, which is none of the names "
               "compared after it: '', None and 'XXXX' all fall through to the generic branch"),
    Equivalent(HOST_READS, "device_resident",
               r"for leaf in value\.values\(include_nested=True, leaves_only=True\)\)",
               r"for leaf in value\.values\(include_nested=True, (leaves_only=(None|False))?\)\)",
               "with the nested TensorDicts among the values too, each is itself checked leaf by "
               "leaf (the TensorDict branch): the same verdict"),

    # ------------------------------------------------------------ harness/adapters/scope.py
    Equivalent(SCOPE, "output_keys",
               r"settings\(max_examples=draws, derandomize=True, database=None, deadline=None,",
               r"settings\(max_examples=draws, derandomize=True, deadline=None,",
               DERANDOMIZED_NO_DATABASE),
    Equivalent(SCOPE, "output_keys", r"phases=\[Phase\.generate\], suppress_health_check",
               r"^suppress_health_check=list\(HealthCheck\)\)$",
               "without a failure only the generate phase draws here: no @example (explicit), "
               "no database (reuse, derandomized), no target() call (target), and `collect` "
               "never raises (it passes over what the oracle raises): no shrink"),
    # -------------------------------------------------------------- harness/adapters/runner.py
    Equivalent(RUNNER, "CheckOutcome.lines",
               r'^return Failure\("", self\.detail, self\.minimal, self\.blob, self\.notes\)'
               r'\.lines\(replay\)$',
               r'^return Failure\(((None|"XXXX"), self\.detail, self\.minimal, self\.blob|'
               r'"", self\.detail, self\.minimal, None), self\.notes\)',
               "`Failure.lines` reads neither the failure's kind nor its blob (the blob reaches "
               "the reader in the replay line, `replayer`): the lines are the same"),
    Equivalent(RUNNER, "traces_to", r"^default\) != default\)\):$",
               r"^(None)?\) != default\)\):$",
               "`Call.of(case, info.reference)` binds the contract's signature, and `default` is "
               "that signature's own default for `layout` (`_layout_default`, not None here): "
               "`Call.arg` returns the contract's default before it would fall back to its "
               "`default` argument, so None or no fallback reads the same"),
    Equivalent(RUNNER, "scope_hint",
               r'^chosen = Adapter\(report\.adapter, "custom", report\.record, report\.target, '
               r'wrap=lambda f: f\)$',
               r'^chosen = Adapter\((None|report\.adapter), (None|"custom"|"XXcustomXX"|'
               r'"CUSTOM"), report\.record, (None|report\.target), wrap=(None|lambda f: f|'
               r'lambda f: None)\)$',
               "the stand-in adapter is read only by `command_words`, which, given `scope`, "
               "reads its `record` alone: its name, framework, target and wrapper are never read"),
    Equivalent(RUNNER, "fitting",
               r"made = \", \"\.join\(f\"\{a\.name\} \(\{a\.versions or 'any'\}\)\"",
               r"a\.versions or '(XXanyXX|ANY)'",
               "unreachable: an adapter without `versions` fits every version (`Adapter.fits`), "
               "so the error that lists adapters none of which fits never lists one without them"),
    Equivalent(RUNNER, "run_adapter",
               r'^return failed\(str\(err\), misfit=f"cannot be imported: \{err\}"\)$',
               r"^return failed\((None|str\(None\)), misfit=",
               "given a misfit, `failed` makes no outcomes, and `why` is only an outcome's "
               "detail: the report is the same"),
    Equivalent(RUNNER, "fit_problem",
               r"^probes \+= \[info\.example\] if info\.example is not None else \[\]$",
               r"if \(info\.example is not None\) or True else",
               "a record without an example gets the probe None, whose `call_of` fails (no "
               "`args`) with an AttributeError: no signature's failure, passed over as every "
               "other probe's failure is"),
    Equivalent(RUNNER, "completed",
               r"out\.set\(key, expected\.get\(key\)\.to\(out\.device\) if out\.device else "
               r"expected\.get\(key\)\)",
               r"(if \(out\.device\) (and False|or True) else|\.to\(None\) if out\.device)",
               "CPU-equivalent: the oracle's tensors are on the CPU, and so is every output a CPU "
               "run completes (`.to(None)` and `.to('cpu')` of a CPU tensor are that tensor); a "
               "target on CUDA has its completed keys moved to its device, not run here"),
    Equivalent(RUNNER, "print_report", r'else "left"\)$', r'else "(XXleftXX|LEFT)"\)$',
               RICH_LEFT),  # both tables: `justify="right" if column in (...) else "left"`

    # -------------------------------------------------------------- harness/mutation/target.py
    Equivalent(TARGET, "prepare",
               r'^"source_paths": \[top if source\.is_dir\(\) else str\(relative\)\],$',
               r"top if \(source\.is_dir\(\)\) or True else",
               "the module's top (`relative.parts[0]`) is a file only when the module is "
               "top-level, and then its relative path is that one part: `top` is "
               "`str(relative)`"),
    Equivalent(TARGET, "main", r"(read_results\(workdir, \[str\(relative\)\], \[\], located=str\)|"
               r"driver\.Report\(scope=\[str\(relative\)\], patterns=\[\],)",
               r"(\[str\(relative\)\], None, located=str\)|patterns=None,)",
               "no patterns: `read_results` filters only when `patterns` is truthy, and the "
               "report's `patterns` is read by the driver's own runs, never by `print_report`"),
    Equivalent(TARGET, "Target.settings",
               r"derandomize=True, database=None,",
               r"derandomize=True, phases=\[Phase\.explicit, Phase\.generate\]",
               "Hypothesis' settings have no database under `derandomize=True`, whatever the "
               "parent profile names: dropping `database=None` beside it changes nothing"),
    Equivalent(RUNNER, "completed", r"^out = out\.clone\(recurse=False\)$",
               r"^out = out\.clone\(recurse=None\)$",
               "`TensorDict.clone` reads `recurse` only for its truth: None is False, the "
               "shallow copy that keeps the target's own tensors"),
)

# ------------------------------------------------------------ the framework adapters' conversion
# modules (harness/adapters/<framework>.py; issue 39), on stand-ins of the frameworks' functions
SKYRL_MEGATRON = "harness/adapters/skyrl_megatron.py"
MEGATRON = "harness/adapters/megatron.py"
VERL_MCORE = "harness/adapters/verl_mcore.py"
OPENRLHF = "harness/adapters/openrlhf.py"
TRL = "harness/adapters/trl.py"
VERL = "harness/adapters/verl.py"
KEYWORD_ONLY = ("the argument read here is keyword-only in the contract (default None), so a "
                "Call built without the contract's signature finds it in the case's kwargs or "
                "not at all, as the contract's Call does: the same value either way")
LAYOUT_UNREAD = ("the candidate takes the contract's `layout` keyword and never reads it: its "
                 "domain (`supports`) is zigzag calls only, the one layout the framework has, so "
                 "the default is never read either")

EQUIVALENT += (
    Equivalent(SKYRL_MEGATRON, "*", r'layout="zigzag", cp_rank=None\):$',
               r'layout="(XXzigzagXX|ZIGZAG)", cp_rank=None\):$', LAYOUT_UNREAD),
    Equivalent(MEGATRON, "bshd_adapter", r'layout="zigzag", cp_rank=None\):$',
               r'layout="(XXzigzagXX|ZIGZAG)", cp_rank=None\):$', LAYOUT_UNREAD),
    Equivalent(MEGATRON, "default_group",
               r'tempfile\.mkdtemp\(prefix="batchproof-megatron-"\), "store"\)$',
               r'tempfile\.mkdtemp\((prefix=None|prefix="(XXbatchproof-megatron-XX|BATCHPROOF-'
               r'MEGATRON-|batchproof-megatron-)"|)\), "(store|XXstoreXX|STORE)"\)$',
               "the names of the rendezvous' fresh temporary folder and of the file gloo "
               "creates in it: any name there is a new file no one else reads (tests/"
               "test_conversion_megatron.py checks the folder is fresh and the file not yet "
               "there)"),
    Equivalent(VERL_MCORE, "replay_data_adapter", r'layout="zigzag", cp_rank=None\):$',
               r'layout="(XXzigzagXX|ZIGZAG)", cp_rank=None\):$', LAYOUT_UNREAD),
    Equivalent(VERL_MCORE, "replay_data_adapter", r"routes\.shape\[-2\]",
               r"routes\.shape\[\+2\]",
               "the routes verl replays are (1, Tp, layers, topk), pad_for_cp's form, which the "
               "adapter's cases (replay_padded_cases) draw and a router's replay target needs "
               "(n, topk) per layer: four dimensions, where shape[2] is shape[-2]"),
    Equivalent(VERL_MCORE, "a_rank_holds_a_pad",
               r'cp_op\.rank_positions\(cu_padded, cp_size, "zigzag", r\)',
               r'cp_op\.rank_positions\(cu_padded, cp_size, (None|"XXzigzagXX"|"ZIGZAG"), r\)',
               "ops.cp.rank_positions reads only whether the layout is 'contiguous': every "
               "other value is the zigzag layout"),
    Equivalent(VERL_MCORE, "as_nested", r"if real else field\[0, :0\]$",
               r"if real else field\[0, :1\]$",
               "there are no real values only when there are no sequences (cu_seqlens [0]), and "
               "then the padded row has no positions (cu_seqlens_padded [0]): field[0, :1] is "
               "as empty as field[0, :0]"),
    Equivalent(OPENRLHF, "equal_size_not_divisible",
               r"and 1 <= k <= len\(values\) and len\(values\) % k != 0\)$",
               r"and (2 <= k <= len|1 < k <= len|1 <= k < len)\(values\) and len\(values\) "
               r"% k != 0\)$",
               "n % 1 and n % n are 0: k = 1 and k = n are never 'not divisible', so the range's "
               "bounds decide nothing there"),
    Equivalent(OPENRLHF, "packed_segments", r"torch\.tensor\(\[flat\.numel\(\)\], "
               r"device=flat\.device\)", r"torch\.tensor\(\[flat\.numel\(\)\], "
               r"(device=None)?\)",
               "CPU-equivalent: the row's end is made on the default device, the CPU, where "
               "OpenRLHF's position ids are on every run here; position ids on a GPU would need "
               "it there (the adapter's devices are the CPU only)"),
    Equivalent(TRL, "_call", r"return case if isinstance\(case, Call\) else Call\.of",
               r"if \(isinstance\(case, Call\)\) and False else Call\.of",
               "Call.of returns a Call it is given as it is"),
    Equivalent(TRL, "_multiple", r"_call\(case, pack_contract\)", r"_call\(case, None\)",
               "pad_to_multiple is keyword-only: without the contract's signature a case that "
               "does not pass it reads None instead of the default 1, and both mean no tail pad "
               "(_pad_length) and no bad multiple (bad_multiple)"),
    Equivalent(TRL, "bad_pad_token_id", r"_call\(case, pack_contract\)", r"_call\(case, None\)",
               "pad_token_id is keyword-only: without the contract's signature a case that does "
               "not pass it reads None instead of the default 0, and both are not 'bad' (None is "
               "left to torch's TypeError, the contract's type)"),
    Equivalent(TRL, "grpo_composable", r"_call\(case, rl_contract\)", r"_call\(case, None\)",
               KEYWORD_ONLY),
    Equivalent(TRL, "_per_token_rows", r"_call\(case, rl_contract\)", r"_call\(case, None\)",
               KEYWORD_ONLY),
    Equivalent(TRL, "grpo_domain", r"_call\(case, rl_contract\)", r"_call\(case, None\)",
               "layout, rewards and device are keyword-only: without the contract's signature a "
               "case that does not pass layout reads None instead of the default 'left', and "
               "neither is two_segment (rewards and device default to None either way)"),
    Equivalent(TRL, "_none_as_nan", r'float\("nan"\)', r'float\("NAN"\)',
               "float() reads 'NAN' as it reads 'nan'"),
    Equivalent(TRL, "_pad_length", r"or multiple < 1:$", r"or multiple (<= 1|< 2):$",
               "a multiple of 1 pads nothing (-total % 1 == 0): returning 0 for it early is the "
               "same"),
    Equivalent(TRL, "_pad_length", r"^return 0$", r"^return 1$",
               "the pad length is read only by tail_pad_split, which asks for 2 or more: 0 and "
               "1 both say no"),
    Equivalent(TRL, "_total", r"^return 0 if samples is None else sum",
               r"^return (0 if \(samples is None\) and False|1 if samples is None) else sum",
               "its callers (bad_multiple, tail_pad_split through _pad_length) read it only "
               "after _samples found samples: the None branch is never taken"),
    Equivalent(TRL, "grpo_composable", r"default=0\)$", r"default=(None|1)\)$",
               "with no responses the batch is 0, every per-token argument must then be an "
               "empty list, and _tool_mask_broadcasts returns before it reads the width"),
    Equivalent(TRL, "grpo_pad_adapter", r'layout="left", max_seq_len=None, device=None$',
               r'layout="(XXleftXX|LEFT)", max_seq_len=None, device=None$',
               "every layout but two_segment is refused with the same NotImplementedError: the "
               "default's value, any other than two_segment, is never read otherwise"),
    Equivalent(TRL, "grpo_pad_adapter",
               r'padding_value=0(\.0)?, padding_side="(left|right)"\)$',
               r'^(?!.*padding_value).*padding_side="(left|right)"\)$',
               "trl.trainer.utils.pad's padding_value defaults to 0 (the masks' and the "
               "logprobs' pad: torch.full casts it to the rows' dtype)"),
    Equivalent(TRL, "grpo_pad_adapter", r'padding_side="right"\)$',
               r'^(?!.*padding_side).*\)$',
               "trl.trainer.utils.pad's padding_side defaults to 'right'"),
    Equivalent(TRL, "padding_free_adapter", r"\(int\(segments\.max\(\)\) \+ 1 if segments",
               r"\(int\(segments\.max\(\)\) \+ 2 if segments",
               "one more -1 after the samples' owners: only segments up to the largest are read"),
    Equivalent(TRL, "padding_free_adapter", r"^else 0\), dtype=torch\.int64\)$",
               r"^else 1\), dtype=torch\.int64\)$",
               "with no target there is no segment to read: one -1 more is never read"),
    Equivalent(VERL, "equal_size_not_divisible", r"and k > 0 and len\(values\) % k != 0\)$",
               r"and k > 1 and len\(values\) % k != 0\)$",
               "n % 1 is 0: k = 1 is never 'not divisible', so k > 0 and k > 1 agree"),
    Equivalent(VERL, "micro_checked_by_assert",
               r"_int\(group\) and group > 0 and len\(lengths\) % group != 0\)$",
               r"_int\(group\) and group > 1 and len\(lengths\) % group != 0\)$",
               "n % 1 is 0: a group size of 1 never leaves a remainder, so group > 0 and "
               "group > 1 agree"),
    Equivalent(VERL, "_segment_lengths",
               r"if attention is None or attention\.dim\(\) != 2 or None in \(prompt_width,",
               r"if attention is None (or attention\.dim\(\) != 2 and|and attention\.dim\(\) "
               r"!= 2 or) None in \(prompt_width,",
               "a None or 1-D attention mask read on fails (None.to, a 1-D tensor indexed by two "
               "axes) inside the try, whose except returns the same None"),
    Equivalent(VERL, "defect_in_unread_fields", r"or _is_nested_batch\(td\)$",
               r"or _is_nested_batch\(None\)$",
               "a nested batch holding verl's four keys has them jagged (input_ids at least, "
               "made by nest_by_mask), and the contract rejects a jagged field of a batch it is "
               "to nest: the reduced batch is rejected too, and the predicate is False either "
               "way (tests/test_conversion_verl.py::"
               "test_a_nested_batchs_defect_is_not_in_unread_fields)"),
)

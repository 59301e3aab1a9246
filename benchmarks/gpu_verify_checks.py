"""`batchproof verify --device cuda` one check per process, many at once (issue 19).

    python benchmarks/gpu_verify_checks.py OUTDIR RECORD ... [--jobs N] [--limit S]
        [--profile nightly]

A record whose checks together outlast one process's time runs here check by check, side by
side: each (record, check) is one `batchproof verify --op RECORD --check CHECK` with its own
time limit and JSON report. The summary counts, per record, the checks that passed, failed, or
were cut by the limit (a cut check did not pass), and the examples that ran.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from batchproof import registry


def run_one(out: Path, record: str, check: str, profile: str, limit: int,
            device: str = "cuda") -> dict:
    name = f"{record}__{check.replace(':', '_')}"
    report = out / f"{name}.json"
    command = [sys.executable, "-m", "batchproof", "verify", "--device", device, "--profile",
               profile, "--op", record, "--check", check, "--json", str(report)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        (out / f"{name}.txt").write_text(done.stdout + done.stderr)
    except subprocess.TimeoutExpired:
        return {"record": record, "check": check, "status": "cut", "examples": 0}
    if not report.exists():
        return {"record": record, "check": check, "status": f"no report (rc {done.returncode})",
                "examples": 0}
    result = json.loads(report.read_text())["checks"][0]
    return {"record": record, "check": check, "status": result["status"],
            "examples": result["examples"], "seconds": result["seconds"],
            "error": (result.get("error") or "")[:300]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("records", nargs="+")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--limit", type=int, default=450)
    parser.add_argument("--profile", default="nightly")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of this script")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = [(r, c) for r in args.records for c in registry.get(r).check_names()]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda p: run_one(args.out, *p, args.profile, args.limit,
                                                     args.device),
                                pairs))
    (args.out / "checks.json").write_text(json.dumps(results, indent=2))
    for record in args.records:
        mine = [r for r in results if r["record"] == record]
        passed = sum(r["status"] == "pass" for r in mine)
        cut = [r["check"] for r in mine if r["status"] == "cut"]
        other = [f"{r['check']}: {r['status']} {r.get('error', '')}" for r in mine
                 if r["status"] not in ("pass", "cut")]
        examples = sum(r["examples"] for r in mine)
        print(f"{record}: {passed}/{len(mine)} checks passed, {examples} examples"
              + (f"; cut by the {args.limit} s limit: {cut}" if cut else "")
              + "".join(f"\n    {line}" for line in other))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""suite_files_test.py: a malformed scenarios/*.ini is an error naming the file and the line, and
the other suites stay usable (issue 25). Builds a scenarios folder of two good suites (copies of
smoke and sync) and one broken file per case, then checks scripts/suitelib.load_suite's message,
`run_suite.py list` (the good ones listed, the bad one marked UNUSABLE, exit 2), a dry run of
--suite smoke beside the broken file (runs), and a default run (refused, naming the file). Also
run_suite's own input checks (issue 25): --devices past dpbench's max_ranks and an --out that
takes no files exit 2 at once; a killed run's temp files are found; a full disk's manifest
status is set in place.
In-process (suitelib.SCENARIOS points at the temporary folder); seconds. Standard library only.

  python3 scripts/suite_files_test.py
"""
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_suite  # noqa: E402
import suite_results  # noqa: E402
import suitelib  # noqa: E402

GOOD = """[suite]
about = a test suite
default = yes
target = lenet:0.5
[runs]
a = --model lenet --devices 1
"""
# (case, file text, line the message must name, words it must hold)
CASES = [
    ("duplicate key", GOOD + "a = --model lenet --devices 2\n", 7, ["[runs] has 'a' twice"]),
    ("duplicate section", GOOD + "[runs]\nb = --devices 2\n", 7, ["section [runs] twice"]),
    ("unclosed quote", GOOD + "b = --set \"--lr 0.1\n", 7, ["[runs] b:", "No closing quotation"]),
    ("unknown key", GOOD.replace("default = yes", "defualt = yes"), 3,
     ["unknown key 'defualt' in [suite]"]),
    ("unknown section", GOOD + "\n[rnus]\nb = --devices 2\n", 8, ["unknown section [rnus]"]),
    ("DEFAULT section", "[DEFAULT]\nx = 1\n" + GOOD, 1, ["unknown section [DEFAULT]"]),
    ("no section header", "about = x\n" + GOOD, 1, ["before any [section]"]),
    ("not key = value", GOOD + "just words\n", 7, ["not 'key = value'"]),
    ("bad target", GOOD.replace("lenet:0.5", "lenet:high"), 4, ["target: 'lenet:high'"]),
    ("bad launchers", GOOD.replace("default = yes", "launchers = mpi"), 3, ["launchers"]),
    ("unclosed quote in [micro]", GOOD + "[micro]\ncpu = --benchmark_filter='x\n", 8, ["[micro] cpu:"]),
]
failures = []


def expect(ok, what, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)
        if detail:
            print("\n".join("     | " + x for x in detail.splitlines()[-12:]))


def run_main(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = run_suite.main(argv)
        except SystemExit as e:
            rc, text = (e.code, "") if isinstance(e.code, int) else (1, str(e.code))
            err.write(text)
    return rc, out.getvalue() + err.getvalue()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        scen = os.path.join(tmp, "scenarios")
        os.makedirs(scen)
        for good in ("smoke", "sync"):
            shutil.copy(os.path.join(suitelib.SCENARIOS, good + ".ini"), scen)
        suitelib.SCENARIOS = scen
        for case, text, line, words in CASES:
            path = os.path.join(scen, "broken.ini")
            with open(path, "w") as f:
                f.write(text)
            try:
                suitelib.load_suite("broken")
                msg = "(accepted)"
            except suitelib.SuiteError as e:
                msg = str(e)
            expect(f"{path} line {line}:" in msg and all(w in msg for w in words),
                   f"{case}: load_suite names the file and line {line}", msg)
            rc, out = run_main(["list"])
            expect(rc == 2 and "broken (UNUSABLE)" in out and f"line {line}" in out
                   and "smoke (not default)" in out and "sync:" in out,
                   f"{case}: list lists smoke and sync, marks broken (exit {rc})", out)
        # The last broken file stays: --suite smoke still runs (a dry run), a default run does not.
        dry = ["run", "--dry-run", "--out", os.path.join(tmp, "out"), "--backend", "cpu"]
        rc, out = run_main(dry + ["--suite", "smoke"])
        expect(rc == 0 and "steps" in out, f"--suite smoke runs beside a broken file (exit {rc})",
               out)
        rc, out = run_main(dry)
        expect(rc == 2 and "broken.ini line" in out,
               f"a default run (every suite file) is refused naming the file (exit {rc})", out)
        rc, out = run_main(dry + ["--suite", "broken"])
        expect(rc == 2 and "broken.ini line" in out,
               f"--suite broken is refused naming the file and line, exit 2 (exit {rc})", out)
        rc, out = run_main(dry + ["--suite", "nosuch"])
        expect(rc == 2 and "no suite 'nosuch'" in out, f"an unknown suite is exit 2 (exit {rc})", out)
        # --devices beyond what dpbench runs, an --out that takes no files: exit 2 before any work.
        info = json.dumps({"cores": 2, "cuda_devices": 0, "max_ranks": 64})
        fake_bin = os.path.join(tmp, "dpbench")
        with open(fake_bin, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(fake_bin, 0o755)
        rc, out = run_main(dry + ["--suite", "smoke", "--devices", "1,2,99", "--info", info])
        expect(rc == 2 and "--devices 1,2,99: 99" in out and "1 to 64" in out,
               f"--devices 1,2,99 refused naming 99 and the limit (exit {rc})", out)
        afile = os.path.join(tmp, "afile")
        open(afile, "w").close()
        rc, out = run_main(["run", "--out", os.path.join(afile, "out"), "--suite", "smoke",
                            "--bin", fake_bin, "--info", info, "--no-micro"])
        expect(rc == 2 and "cannot write there" in out,
               f"--out under a file refused at once (exit {rc})", out)
        # A killed run's temp files (a dead pid) beside the results go when a run starts there.
        res = os.path.join(tmp, "res")
        os.makedirs(os.path.join(res, ".tmp"))
        left = [os.path.join(res, "manifest.json.tmp999999999"),
                os.path.join(res, ".tmp", "micro-smoke.json.tmp.999999999")]
        for x in left:
            open(x, "w").close()
        expect(suite_results.stale_temps(res) == left[:1], "stale_temps finds manifest.json.tmp<dead pid>",
               str(suite_results.stale_temps(res)))
        # A full disk: the manifest's status set in place, without growing the file.
        man = os.path.join(res, "manifest.json")
        suite_results.write_json(man, {"status": "running", "x": 1})
        size = os.path.getsize(man)
        ok = suite_results.mark_status_in_place(man, "running", "failed")
        with open(man) as f:
            st = json.load(f)["status"]
        expect(ok and st == "failed" and os.path.getsize(man) == size,
               f"mark_status_in_place: running -> {st}, size kept")
        os.remove(os.path.join(scen, "broken.ini"))
        rc, out = run_main(["list"])
        expect(rc == 0 and "UNUSABLE" not in out, f"list of good suites exits 0 (exit {rc})", out)
    print("suite_files_test: " + (f"{len(failures)} FAILED" if failures else "all passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

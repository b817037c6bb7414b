"""report_main.py: the command line shared by the suites' reports (scripts/cluster_report.py,
scripts/sharding_report.py): one results folder in, the report's lines printed, its Markdown and
CSV written beside the suite's results (atomically, by the report's own write_files).

  sys.exit(report_main(sys.argv, __doc__, "cluster_report", SUITE, report_lines,
                       (MD_NAME, CSV_NAME)))

Exit codes: 0 the report was printed (or --help), 1 the folder has none of the suite's results,
2 bad arguments (the usage is printed). Standard library only.
"""
import json
import os


def read_manifest(out_dir):
    """DIR/manifest.json as a dict ({} when the folder has none)."""
    path = os.path.join(out_dir, "manifest.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def report_main(argv, doc, name, suite, report, written):
    """argv: [program, DIR]; report(DIR) -> the report's lines ([] when DIR has none of the
    suite's results), writing its files; written: those files' names in DIR."""
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(doc)
        return 0 if len(argv) == 2 else 2
    lines = report(argv[1])
    if not lines:
        print(f"{name}: no {suite} results in {argv[1]}")
        return 1
    print("\n".join(lines))
    print(f"\n(written: {', '.join(os.path.join(argv[1], w) for w in written)})")
    return 0

"""The command line of a test script that runs several cases in one process: its arguments are
cases separated by "+", run one after the other, so the interpreter starts and torch (and
transformers) import once for all of them. A case that raises is named on stderr first."""

import sys


def run_each(run_case, argv=None):
    case = []
    for arg in (sys.argv[1:] if argv is None else argv) + ["+"]:
        if arg != "+":
            case.append(arg)
        elif case:
            try:
                run_case(case)
            except BaseException:
                print(f"case failed: {' '.join(case)}", file=sys.stderr, flush=True)
                raise
            case = []

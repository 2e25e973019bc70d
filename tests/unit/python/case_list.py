"""The command line of a test script that runs several cases in one launch: its arguments are
cases separated by "+", run one after the other in the same ranks, so the interpreter starts and
torch (and transformers) import once for all of them."""

import sys


def run_each(run_case, argv=None):
    case = []
    for arg in (sys.argv[1:] if argv is None else argv) + ["+"]:
        if arg != "+":
            case.append(arg)
        elif case:
            run_case(case)
            case = []

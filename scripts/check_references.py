#!/usr/bin/env python3
"""Fails when the tree names something that does not exist: a path of the project's own folders
(`core/zero/bucket.h`, `tests/support/run_bounded.sh`), read from the repository root or from
the naming file's folder, or a section of docs/DESIGN.md cited as `docs/DESIGN.md, Section` or
`docs/DESIGN.md "Section"` (a heading, or a paragraph or list item that starts with a bold
title). One line per dangling name, then a count; exit 1 when there is one.

usage: check_references.py [ROOT]   (default: this script's repository; the files git tracks,
                                     or every file under ROOT outside git)

Not read: tests/data/ (lists of files of other projects, under their own paths), and the lines
of CMake that write a fixture (`file(WRITE ...)`) or expect its name in a test's output
(`..._REGULAR_EXPRESSION`): those files exist only in the build tree."""

import os
import re
import subprocess
import sys

TOP = ("base core parallel optim data weights train launcher tools models examples tests bench "
       "scripts "
       "docs python testdevice configs").split()
EXTENSIONS = ("h", "cpp", "cu", "py", "sh", "md", "cmake", "json", "yaml", "txt")
PATH = re.compile(r"(?<![\w/.$-])((?:%s)/[\w./-]*\w\.(?:%s))\b" % ("|".join(TOP),
                                                                  "|".join(EXTENSIONS)))
SECTION = re.compile(r"DESIGN\.md(?:'s)?,? (?:\"([^\"]+)\"|([A-Z][\w -]+?))(?=[).;:,]|$)")
READ = (".h", ".cpp", ".cu", ".py", ".sh", ".cmake", "CMakeLists.txt", ".md")


def files_of(root):
    git = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if git.returncode == 0 and git.stdout.strip():
        return git.stdout.split()
    out = []
    for d, dirs, names in os.walk(root):
        # Outside git: not the build trees (build*/) nor hidden or cache folders.
        dirs[:] = [x for x in dirs if not x.startswith(("build", ".", "__pycache__"))]
        out += [os.path.relpath(os.path.join(d, f), root) for f in names]
    return out


def design_titles(root):
    path = os.path.join(root, "docs", "DESIGN.md")
    if not os.path.exists(path):
        return set()
    text = open(path, encoding="utf-8").read()
    titles = set(re.findall(r"^#+ (.+)$", text, re.M))
    titles |= {t.rstrip(".") for t in re.findall(r"^(?:- )?\*\*([^*]+)\*\*", text, re.M)}
    return titles


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    titles = design_titles(root)
    dangling = []
    for f in sorted(files_of(root)):
        if not f.endswith(READ) or f.startswith("tests/data/"):
            continue
        here = os.path.dirname(f)
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as lines:
            for n, line in enumerate(lines, 1):
                if "file(WRITE" in line or "_REGULAR_EXPRESSION" in line:
                    continue
                for m in PATH.finditer(line):
                    p = m.group(1)
                    if not (os.path.exists(os.path.join(root, p)) or
                            os.path.exists(os.path.join(root, here, p))):
                        dangling.append(f"{f}:{n}: names {p}, which does not exist")
                for m in SECTION.finditer(line):
                    title = (m.group(1) or m.group(2)).strip()
                    if not any(re.match(re.escape(title) + r"\b", t) for t in titles):
                        dangling.append(f"{f}:{n}: names docs/DESIGN.md section '{title}', "
                                        "which does not exist")
    print("\n".join(dangling + [f"{len(dangling)} dangling reference(s)"]))
    return 1 if dangling else 0


if __name__ == "__main__":
    sys.exit(main())

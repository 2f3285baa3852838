#!/usr/bin/python3
"""The source tree's shape: each top-level folder's lines of code and share of the whole, and which
folders include each other's headers (an include runs "folder/file.hpp"). Tests, docs, scripts
and build trees are left out (in a git checkout only the files git tracks are read). Exits 1 when
folders include each other in a circle (two or more), or one folder holds more than a quarter of
the code.

  scripts/tree_shares.py [REPO]
"""
import collections
import os
import re
import subprocess
import sys

SOURCE = ('.cpp', '.hpp', '.h', '.cu', '.capnp', '.py')
LEFT_OUT = {'tests', 'docs', 'scripts', 'cmake'}
MAX_SHARE = 0.25


def source_files(repo):
    """Every source file, as a path relative to repo: git's tracked files, else a walk of the tree."""
    try:
        out = subprocess.run(['git', '-C', repo, 'ls-files', '-z'], capture_output=True, check=True).stdout
        names = [n for n in out.decode(errors='replace').split('\0') if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for root, dirs, files in os.walk(repo):
            dirs[:] = [d for d in dirs if not d.startswith(('.', 'build'))]
            names += [os.path.relpath(os.path.join(root, f), repo) for f in files]
    return [n for n in names if n.endswith(SOURCE) and '/' in n and n.split('/')[0] not in LEFT_OUT
            and not n.startswith(('.', 'build'))]


def circles(deps):
    """The folders that include each other in a circle: each strongly connected set of two or more."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(deps.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return found


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    lines, deps = collections.Counter(), collections.defaultdict(set)
    for name in source_files(repo):
        top = name.split('/')[0]
        text = open(os.path.join(repo, name), errors='replace').read()
        lines[top] += text.count('\n')
        for m in re.finditer(r'^\s*#\s*include\s+"([A-Za-z_]+)/', text, re.M):
            deps[top].add(m.group(1))
    tops = sorted(lines)
    for t in tops:
        deps[t] = {d for d in deps[t] if d != t and d in lines}
    total = sum(lines.values())
    if total == 0:
        print(f"no source files under {repo}", file=sys.stderr)
        return 2
    for t in sorted(tops, key=lambda t: -lines[t]):
        print(f"{t + '/':16} {lines[t]:6} lines {100.0 * lines[t] / total:5.1f}%  includes: {' '.join(sorted(deps[t])) or '-'}")
    print(f"{'total':16} {total:6} lines")
    loops = circles(deps)
    for part in loops:
        print(f"circle: {', '.join(p + '/' for p in part)} include each other")
    big = [t for t in tops if lines[t] > total * MAX_SHARE]
    for t in big:
        print(f"too big: {t}/ holds more than {MAX_SHARE:.0%} of the code")
    return 1 if loops or big else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/python3
"""The source tree's shape: each top-level folder's lines of code and share of the whole, and which
folders include each other's headers (an include runs "folder/file.hpp"). Tests, docs, scripts
and build trees are left out. Exits 1 when two folders include each other (a two-way dependency)
or one folder holds more than a quarter of the code.

  scripts/tree_shares.py [REPO]
"""
import collections
import os
import re
import sys

SOURCE = ('.cpp', '.hpp', '.h', '.cu', '.capnp', '.py')
LEFT_OUT = {'tests', 'docs', 'scripts', 'cmake'}
MAX_SHARE = 0.25


def folders(repo):
    return sorted(d for d in os.listdir(repo)
                  if os.path.isdir(os.path.join(repo, d)) and not d.startswith(('.', 'build')) and d not in LEFT_OUT)


def files(repo, top):
    for root, _, names in os.walk(os.path.join(repo, top)):
        for n in names:
            if n.endswith(SOURCE):
                yield os.path.join(root, n)


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    tops = folders(repo)
    lines, deps = {}, collections.defaultdict(set)
    for t in tops:
        n = 0
        for f in files(repo, t):
            text = open(f, errors='replace').read()
            n += text.count('\n')
            for m in re.finditer(r'#include\s+"([A-Za-z_]+)/', text):
                if m.group(1) != t and m.group(1) in tops:
                    deps[t].add(m.group(1))
        lines[t] = n
    total = sum(lines.values())
    for t in sorted(tops, key=lambda t: -lines[t]):
        print(f"{t + '/':16} {lines[t]:6} lines {100.0 * lines[t] / total:5.1f}%  includes: {' '.join(sorted(deps[t])) or '-'}")
    print(f"{'total':16} {total:6} lines")
    two_way = sorted((a, b) for a in deps for b in deps[a] if a < b and a in deps.get(b, ()))
    for a, b in two_way:
        print(f"two-way: {a}/ and {b}/ include each other")
    big = [t for t in tops if lines[t] > total * MAX_SHARE]
    for t in big:
        print(f"too big: {t}/ holds more than {MAX_SHARE:.0%} of the code")
    return 1 if two_way or big else 0


if __name__ == '__main__':
    sys.exit(main())

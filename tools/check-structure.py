#!/usr/bin/python3
"""Checks the shape of the daemons' C sources (docs/architecture.md, "What .ci/run checks"):
the size of files, of bridge files, of functions and of `struct bridge`, and that no circle
ties the files and no arrow runs back up.

  tools/check-structure.py [--root DIR] [--exceptions FILE] [--known] [--floors]

It reads DIR/coordinator/ and DIR/agent/ (DIR: the repository, by default the one this script
is in; agent/ where it exists), each a house of its own. A file
X.c and its header X.h are one room; a header without a source of its name is a room of its
own. An arrow A -> B: a file of A includes a file of B, or calls a function that B alone
defines (a static function of a source file is its own; a header's static inline ones are its
includers'). The rooms stand on floors: each above all it uses, the floor 1 being the ground.
Where arrows make a loop, the floors are put in the order that leaves the fewest arrows (then
the fewest includes and calls on them) going from a lower floor to a higher one: those arrows
"run back up".
A circle is a loop of arrows among source files (a loop closed only through a header of its
own is an arrow that runs back up, not a circle).

Each violation is one line. The lines of the exceptions file (tools/structure-exceptions.txt
for the real tree; '#' starts a comment) are known ones: a listed violation does not fail, a
listed one that no longer occurs does (stale), so the list can only shrink. A line matches
with or without its figure in parentheses at the end. Exit 0: none but known ones; 1: a
violation or a stale exception; 2: bad use. Python 3's standard library only.
"""
import argparse
import os
import re
import sys

FILE_LINES = 800
BRIDGE_LINES = 700
FUNCTION_LINES = 120
BRIDGE_MEMBERS = 25
HOUSES = ("coordinator", "agent")  # the daemons' folders, each read as a house of its own
SIZE_MARK = re.compile(r"^\s*\*\s*Size:\s*\S")
BRIDGE_FILE = re.compile(r"^(mqtt_)?bridge.*\.c$")
IDENT_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "_Alignof", "_Generic", "do", "else",
    "case", "goto", "defined", "_Static_assert", "__attribute__", "typeof", "__typeof__",
}


def blank_c(text):
    """The text with its comments and the insides of its string and character literals made
    spaces, newlines kept, so that lines and columns stay where they were. Tolerant: an
    unterminated comment or literal ends at the end of the text (a literal at its line's)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j, n)
            end = j + 1 if j < n and text[j] == c else j
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:end - 1]) + (c if end > j else ""))
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Source:
    """One file: its lines, raw and blanked, its includes, its functions."""

    def __init__(self, root, rel):
        self.rel = rel
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            self.text = f.read()
        self.lines = self.text.split("\n")
        if self.lines and self.lines[-1] == "":
            self.lines.pop()
        self.code = blank_c(self.text).split("\n")[: len(self.lines)]
        self.includes = []
        for raw, code in zip(self.lines, self.code):
            m = INCLUDE.match(raw)
            if m and code.lstrip().startswith("#"):
                self.includes.append(m.group(1))
        self.functions = self._functions()

    def _functions(self):
        """(name, first line, last line, static, body lines): a definition is a header at
        column 0, its '{' alone at column 0 and its end a '}' at column 0 (clang-format's
        Linux braces)."""
        found = []
        i = 0
        while i < len(self.code):
            if self.code[i].rstrip() != "{":
                i += 1
                continue
            start = i - 1
            while start > 0 and self.code[start][:1] in (" ", "\t"):
                start -= 1
            header = " ".join(self.code[start:i])
            end = i + 1
            while end < len(self.code) and not self.code[end].startswith("}"):
                end += 1
            names = [m.group(1) for m in IDENT_CALL.finditer(header)
                     if m.group(1) not in KEYWORDS]
            if names and i > 0 and self.code[start][:1] not in ("", " ", "\t", "#"):
                static = re.match(r"\s*static\b", header) is not None
                found.append((names[0], start + 1, end + 1, static, (i + 1, end)))
            i = end + 1
        return found

    def top_comment(self):
        m = re.match(r"\s*/\*.*?\*/", self.text, re.S)
        return m.group(0) if m else ""


def sccs(nodes, edges):
    """Tarjan's strongly connected parts, each a sorted list, in a stable order."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    part.append(w)
                    if w == node:
                        break
                out.append(sorted(part))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def order_part(part, edges, weight):
    """The rooms of one strongly connected part from the ground up, in the order that leaves
    the fewest arrows from a lower room to a higher one, then the fewest uses on them (includes
    and calls), then the fewest of them from a source file (a header that includes back up is
    the one that runs back up): exact up to 16 rooms, greedy beyond."""
    n = len(part)
    if n <= 16:
        pos = {v: k for k, v in enumerate(part)}
        into = [[(pos[u], weight[(u, v)], u.endswith(".c")) for u in part
                 if v in edges.get(u, ())] for v in part]
        best = {0: ((0, 0, 0), [])}
        for mask in range(1 << n):
            if mask not in best:
                continue
            cost, seq = best[mask]
            for k in range(n):
                if mask & (1 << k):
                    continue
                up = [(w, code) for (u, w, code) in into[k] if mask & (1 << u)]
                c = (cost[0] + len(up), cost[1] + sum(w for w, _ in up),
                     cost[2] + sum(1 for _, code in up if code))
                nm = mask | (1 << k)
                if nm not in best or (c, seq + [k]) < (best[nm][0], best[nm][1]):
                    best[nm] = (c, seq + [k])
        return [part[k] for k in best[(1 << n) - 1][1]]
    placed, rest = [], set(part)
    while rest:
        # the room that uses the fewest of the rooms still to place goes next
        v = min(rest, key=lambda r: (sum(1 for u in edges.get(r, ()) if u in rest), r))
        placed.append(v)
        rest.discard(v)
    return placed


class House:
    def __init__(self, root, sub="coordinator"):
        self.files = {}
        base = os.path.join(root, sub)
        for dirpath, dirs, names in os.walk(base):
            dirs.sort()
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    rel = os.path.relpath(os.path.join(dirpath, name), root)
                    self.files[rel] = Source(root, rel)
        self.rooms = sorted({self.room(f) for f in self.files})
        self._arrows()

    def room(self, rel):
        stem, ext = os.path.splitext(rel)
        if ext == ".h" and stem + ".c" in self.files:
            return stem + ".c"
        return rel

    def _arrows(self):
        self.ties = {}  # (room, room) -> the names used
        self.uses = {}  # (room, room) -> the includes and calls
        defined = {}
        for rel, src in self.files.items():
            for name, _, _, static, _ in src.functions:
                if static and rel.endswith(".c"):
                    continue
                defined.setdefault(name, set()).add(rel)
        for rel, src in self.files.items():
            a = self.room(rel)
            for inc in src.includes:
                target = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                if target in self.files and self.room(target) != a:
                    self._tie(a, self.room(target), "#include " + inc)
            own = {f[0] for f in src.functions}
            for _, _, _, _, (first, last) in src.functions:
                for line in src.code[first:last]:
                    for m in IDENT_CALL.finditer(line):
                        name = m.group(1)
                        if name in own or name in KEYWORDS:
                            continue
                        others = defined.get(name, set()) - {rel}
                        if len(others) == 1:
                            b = self.room(others.pop())
                            if b != a:
                                self._tie(a, b, name)
        self.edges = {}
        for a, b in self.ties:
            self.edges.setdefault(a, set()).add(b)

    def _tie(self, a, b, name):
        self.ties.setdefault((a, b), set()).add(name)
        self.uses[(a, b)] = self.uses.get((a, b), 0) + 1

    def circles(self):
        """Loops of arrows among source files: the strongly connected parts of the arrows
        between rooms that have a source file."""
        code = [r for r in self.rooms if r.endswith(".c")]
        edges = {a: {b for b in bs if b.endswith(".c")} for a, bs in self.edges.items()
                 if a.endswith(".c")}
        return [p for p in sccs(code, edges) if len(p) > 1]

    def floors(self):
        """Each room's floor, and the arrows that run back up."""
        weight = self.uses
        rank = {}
        back = []
        for part in sccs(self.rooms, self.edges):
            order = order_part(part, self.edges, weight) if len(part) > 1 else part
            for k, v in enumerate(order):
                rank[v] = k
            for a in part:
                for b in self.edges.get(a, ()):
                    if b in rank and b in part and rank[a] < rank[b]:
                        back.append((a, b))
        backset = set(back)
        floor = {}

        def height(v, seen=()):
            if v in floor:
                return floor[v]
            h = 1
            for b in self.edges.get(v, ()):
                if (v, b) not in backset and b not in seen:
                    h = max(h, height(b, seen + (v,)) + 1)
            floor[v] = h
            return h

        for r in self.rooms:
            height(r)
        return floor, sorted(back)


def members(body):
    """The members that a struct's body declares: its declarations at the top level, a
    declaration of several names counting each."""
    n = 0
    depth = 0
    paren = 0
    decl = ""
    for c in body:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c in "([":
            paren += 1
        elif c in ")]":
            paren -= 1
        if depth == 0 and c == ";":
            if decl.strip():
                n += 1
            decl = ""
        elif depth == 0 and paren == 0 and c == ",":
            n += 1
        elif not c.isspace():
            decl += c
    return n


def check(house, limits):
    """The violations: (key, figure, detail lines)."""
    found = []
    for rel, src in sorted(house.files.items()):
        n = len(src.lines)
        if n > limits.file_lines and not any(
                SIZE_MARK.match(l) for l in src.top_comment().split("\n")):
            found.append((f"file over {limits.file_lines} lines without a reason at its top:"
                          f" {rel}", n, []))
        if BRIDGE_FILE.match(os.path.basename(rel)) and n > limits.bridge_lines:
            found.append((f"bridge file over {limits.bridge_lines} lines: {rel}", n, []))
    for rel, src in sorted(house.files.items()):
        for name, first, last, _, _ in src.functions:
            if last - first + 1 > limits.function_lines:
                found.append((f"function over {limits.function_lines} lines: {rel} {name}",
                              last - first + 1, []))
    for part in house.circles():
        detail = [f"  {a} -> {b}: {', '.join(sorted(house.ties[(a, b)]))}"
                  for a in part for b in part if (a, b) in house.ties]
        found.append(("circle: " + " ".join(part), None, detail))
    _, back = house.floors()
    for a, b in back:
        found.append((f"runs back up: {a} -> {b}", None,
                      [f"  {', '.join(sorted(house.ties[(a, b)]))}"]))
    for rel, src in sorted(house.files.items()):
        code = "\n".join(src.code)
        for m in re.finditer(r"\bstruct\s+bridge\s*\{", code):
            depth, j = 1, m.end()
            while j < len(code) and depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            count = members(code[m.end():j - 1])
            if count > limits.struct_members:
                found.append((f"struct bridge over {limits.struct_members} members: {rel}",
                              count, []))
    return found


def read_exceptions(path):
    known = []
    if path is None or not os.path.exists(path):
        return known
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                known.append(re.sub(r" \(\d+\)$", "", line))
    return known


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=here,
                    help="the tree to read (its coordinator/ and agent/)")
    ap.add_argument("--exceptions", help="the known violations, one per line as printed"
                    " (default: ROOT/tools/structure-exceptions.txt where it exists)")
    ap.add_argument("--floors", action="store_true", help="print each room's floor too")
    ap.add_argument("--known", action="store_true", help="print the known violations too")
    ap.add_argument("--file-lines", type=int, default=FILE_LINES)
    ap.add_argument("--bridge-lines", type=int, default=BRIDGE_LINES)
    ap.add_argument("--function-lines", type=int, default=FUNCTION_LINES)
    ap.add_argument("--struct-members", type=int, default=BRIDGE_MEMBERS)
    limits = ap.parse_args()
    if not os.path.isdir(os.path.join(limits.root, "coordinator")):
        print(f"check-structure: {limits.root}: no coordinator/ there", file=sys.stderr)
        return 2
    exceptions = limits.exceptions
    if exceptions is None:
        exceptions = os.path.join(limits.root, "tools", "structure-exceptions.txt")
    houses = [House(limits.root, sub) for sub in HOUSES
              if os.path.isdir(os.path.join(limits.root, sub))]
    if limits.floors:
        for house in houses:
            floor, _ = house.floors()
            for r in sorted(house.rooms, key=lambda r: (-floor[r], r)):
                print(f"floor {floor[r]:2d}  {r}")
    known = read_exceptions(exceptions)
    failed = 0
    seen = set()
    for key, figure, detail in [v for house in houses for v in check(house, limits)]:
        seen.add(key)
        line = key if figure is None else f"{key} ({figure})"
        if key in known:
            if limits.known:
                print("known: " + line)
            continue
        failed += 1
        print(line)
        for d in detail:
            print(d)
    for key in known:
        if key not in seen:
            failed += 1
            print(f"stale exception (no longer occurs, take it out of the list): {key}")
    print(f"check-structure: {failed} failing, {len(seen & set(known))} known",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

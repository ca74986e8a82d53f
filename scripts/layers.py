#!/usr/bin/env python3
"""The import structure of src/, read from its `use` lines (the `layering` step of scripts/test.sh).

Three rules, all about files, not modules:

* No file imports one from a layer above its own. The layers, top to bottom:
      runtime > controller > broker > client, coordinator, node_io > config, log, metadata > protocol, storage,
      state_machine > types
  A file may import from its own layer and from any layer below.
* No import cycle among files: `a.rs` takes a name from `b.rs` and `b.rs` (directly or through
  other files) one from `a.rs`. The cycles still to be taken apart are listed in KNOWN_CYCLES,
  a list that may only shrink.
* The broker is a router over components: `impl` blocks for `Broker` (its own methods, or a
  trait it implements as the components' host) sit only in the router's own files,
  `src/broker/mod.rs` and `src/broker/router/`. The one other is the IO shell's adapter
  (`runtime/server.rs` implements its own `Served` trait for both node kinds by delegation;
  the broker cannot implement a trait of the layer above it), listed in SHELL_ADAPTERS.

A `use` path, or a `crate::`/`super::` path written inline, is followed to the file that defines the name, through `pub use` re-exports, so a
name a `mod.rs` only re-exports counts as an import of the file that defines it. Test code
(`#[cfg(test)]` modules, inline or in their own files) is left out, as are paths written inline
without a `use` line.

    python3 scripts/layers.py            # exit 1 and the offending imports if a rule is broken
    python3 scripts/layers.py --graph    # also print every file's imports
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

# Rank of each top-level module: a file may import files of its own rank or lower.
LAYERS = {
    "types": 0,
    "protocol": 1,
    "storage": 1,
    "state_machine": 1,
    "config": 2,
    "log": 2,
    "metadata": 2,
    "node_io": 3,
    "client": 3,
    "coordinator": 3,
    "broker": 4,
    "controller": 5,
    "runtime": 6,
}

# Files still inside an import cycle, each with the work that takes it out. A cycle among files
# not all listed here fails the check; so does a listed file that no cycle holds any more (take
# it off the list: the list only shrinks).
KNOWN_CYCLES: dict[str, str] = {}

# The router's own files: the only ones with `impl ... Broker<...>` blocks.
ROUTER_FILES = ("src/broker/mod.rs", "src/broker/router/")
# Files of the layer above that adapt the broker to a trait of their own, with why.
SHELL_ADAPTERS: dict[str, str] = {
    "src/runtime/server.rs": "Served: the metrics snapshot and peer addresses, by delegation",
}
IMPL_BROKER = re.compile(r"^\s*impl\b[^{;]*\bBroker<", re.M)

# Items at the top of a file (an indented `type Output` is an impl's associated type).
ITEM = re.compile(
    r"^(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+(?=fn)|unsafe\s+)*"
    r"(?:struct|enum|fn|const|static|trait|type|union|mod)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
MACRO = re.compile(r"^\s*macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)", re.M)
# `#[cfg(test)]`, `#[cfg(all(test, not(madsim)))]`: code that only tests build.
TEST_CFG = r"#\[cfg\((?:test|all\(test\b[^\]]*)\)\]"
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of segments from the crate root
        self.file = file
        self.children = {}  # name -> Module (file modules and inline ones)
        self.items = set()
        self.uses = []  # (is_pub, [segments]) as written, relative
        self.test = False


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def without_test_blocks(text):
    """The text with every `#[cfg(test)] mod name { ... }` block blanked out."""
    out = []
    i = 0
    pattern = re.compile(TEST_CFG + r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
    while True:
        m = pattern.search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i : m.start()])
        depth = 1
        j = m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append("\n" * text[m.start() : j].count("\n"))
        i = j


def split_top(s):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand(tree, prefix=()):
    """Every path of a use tree (`a::{b, c::{d as e, *}}`), as lists of segments."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        segs = [s.strip() for s in tree.split("::") if s.strip()]
        if segs and " as " in segs[-1]:
            segs[-1] = segs[-1].split(" as ")[0].strip()
        return [list(prefix) + segs]
    head = [s.strip() for s in tree[:brace].split("::") if s.strip()]
    inner = tree[brace + 1 : tree.rfind("}")]
    paths = []
    for part in split_top(inner):
        paths.extend(expand(part, tuple(prefix) + tuple(head)))
    return paths


def load():
    crate = Module((), SRC / "lib.rs")
    modules = {}

    def visit(module, directory):
        """Read module.file; `directory` holds its child modules' files."""
        modules[module.path] = module
        raw = strip_comments(module.file.read_text())
        tests = set(re.findall(TEST_CFG + r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", raw))
        text = without_test_blocks(raw)
        module.items = set(ITEM.findall(text)) | set(MACRO.findall(text))
        use_line = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
        for m in use_line.finditer(text):
            for segs in expand(m.group(2)):
                module.uses.append((m.group(1) is not None, segs))
        # Paths written inline (`super::group::OFFSETS_TOPIC`) import as much as a use line.
        code = use_line.sub("", text)
        # A visibility (`pub(in crate::broker)`) names a module, it imports nothing.
        code = re.sub(r"\bpub\(in\s+[^)]*\)", "pub", code)
        for m in re.finditer(r"\b(?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+", code):
            module.uses.append((False, m.group(0).split("::")))
        for name in MOD_DECL.findall(text):
            if name in tests:
                continue
            for candidate in (directory / f"{name}.rs", directory / name / "mod.rs"):
                if candidate.exists():
                    child = Module(module.path + (name,), candidate)
                    module.children[name] = child
                    sub = candidate.parent if candidate.name == "mod.rs" else directory / name
                    visit(child, sub)
                    break

    visit(crate, SRC)
    return crate, modules


def absolute(module, segs):
    """A use path made absolute (from the crate root); None for another crate's."""
    if not segs:
        return None
    if segs[0] == "crate":
        return list(segs[1:])
    if segs[0] == "self":
        return list(module.path) + list(segs[1:])
    if segs[0] == "super":
        base = list(module.path)
        rest = list(segs)
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
        return base + rest
    if segs[0] in module.children:
        return list(module.path) + list(segs)
    return None  # std::, kafka_protocol::, a name of the enclosing scope


def resolve(modules, segs, seen=None):
    """The files a crate-absolute path leads to."""
    seen = seen or set()
    key = tuple(segs)
    if key in seen:
        return set()
    seen.add(key)
    module = modules[()]
    i = 0
    while i < len(segs) and segs[i] in module.children:
        module = module.children[segs[i]]
        i += 1
    rest = segs[i:]
    if not rest or rest[0] == "*":
        return {module.file}
    name = rest[0]
    if name == "self":
        return {module.file}
    if name in module.items:
        return {module.file}
    found = set()
    for is_pub, use in module.uses:
        if not is_pub:
            continue
        if use[-1] == name or use[-1] == "*":
            target = absolute(module, use)
            if target is None:
                continue
            if use[-1] == "*":
                target = target[:-1] + [name]
            found |= resolve(modules, target + rest[1:], seen)
    return found or {module.file}


def layer(path):
    rel = path.relative_to(SRC).parts
    top = rel[0].removesuffix(".rs")
    return top, LAYERS.get(top)


def main():
    _, modules = load()
    graph = {}
    names = {}
    for module in modules.values():
        if module.file.name == "lib.rs":
            continue
        edges = graph.setdefault(module.file, set())
        for is_pub, segs in module.uses:
            # A re-export is the module's face, not a name the file uses: it is followed in
            # resolve() to the file that defines the name.
            if is_pub:
                continue
            target = absolute(module, segs)
            if target is None:
                continue
            for file in resolve(modules, target):
                if file != module.file and file.name != "lib.rs":
                    edges.add(file)
                    names.setdefault((module.file, file), set()).add(segs[-1])

    rel = lambda p: str(p.relative_to(ROOT))
    problems = []
    for source, targets in sorted(graph.items()):
        s_top, s_rank = layer(source)
        for target in sorted(targets):
            t_top, t_rank = layer(target)
            if s_rank is None or t_rank is None:
                problems.append(f"{rel(source)} -> {rel(target)}: a top-level module without a layer")
            elif t_rank > s_rank:
                what = ", ".join(sorted(names[(source, target)]))
                problems.append(
                    f"upward import: {rel(source)} ({s_top}) takes {what} from {rel(target)} ({t_top})"
                )

    # Tarjan's strongly connected components over the file graph.
    index, low, stack, on_stack, sccs = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                sccs.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    known = []
    in_cycles = {rel(f) for component in sccs for f in component}
    for component in sccs:
        if all(rel(f) in KNOWN_CYCLES for f in component):
            known.append(component)
            continue
        lines = [f"import cycle among {len(component)} files:"]
        members = set(component)
        for source in component:
            for target in sorted(graph[source] & members):
                what = ", ".join(sorted(names[(source, target)]))
                lines.append(f"  {rel(source)} -> {rel(target)}: {what}")
        problems.append("\n".join(lines))

    for module in modules.values():
        path = rel(module.file)
        if path.startswith(ROUTER_FILES) or path in SHELL_ADAPTERS:
            continue
        text = without_test_blocks(strip_comments(module.file.read_text()))
        if IMPL_BROKER.search(text):
            problems.append(f"impl Broker outside the router's files: {path}")

    if "--graph" in sys.argv:
        for source, targets in sorted(graph.items()):
            for target in sorted(targets):
                print(f"{rel(source)} -> {rel(target)}: {', '.join(sorted(names[(source, target)]))}")
    for file in sorted(set(KNOWN_CYCLES) - in_cycles):
        problems.append(f"{file} is in no import cycle now: take it off KNOWN_CYCLES")
    for problem in problems:
        print(problem)
    if known:
        files_known = sum(len(c) for c in known)
        print(
            f"known: {len(known)} import cycles over {files_known} files, each listed with the "
            "work that removes it (KNOWN_CYCLES)"
        )
    files = len(graph)
    edges = sum(len(t) for t in graph.values())
    if problems:
        print(f"{len(problems)} layering problems in {files} files ({edges} imports)")
        return 1
    cycles = "no cycle but the known ones" if KNOWN_CYCLES else "no import cycle"
    print(f"{files} files, {edges} imports: no upward import, {cycles}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""check_layers.py — checks that ctrain's dependencies point one way (docs/architecture.md).

Usage: check_layers.py ROOT MANIFEST
  MANIFEST (written by the Makefile as build/layers.txt) has one line per source folder,
      layer FOLDER: ALLOWED_FOLDER ...
  listing the folders below it that FOLDER may include or call, and one line per object file
  of the library,
      object PATH
  The build gives each folder only those include paths; this script checks the same table
  three more ways and names every offence:
  1. the table itself has no loop (a folder may not, through others, depend on itself);
  2. every `#include "..."` of a source file names a header of its own folder or of an allowed
     one, and headers do not include each other in a loop;
  3. from the objects' symbol tables (nm): a file calls only into its own folder or allowed
     ones, and no two files call each other, directly or round a longer loop (a dispatcher and
     its implementations share a private header, but implementations do not call back).
Exit status 0 when everything holds, 1 with one line per problem otherwise, 2 on bad usage.
"""
import collections
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXT = ('.c', '.cc', '.h', '.cu', '.cuh')


def read_manifest(path):
    layers, objects = {}, []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            kind, _, rest = line.partition(' ')
            if kind == 'layer':
                folder, _, deps = rest.partition(':')
                layers[folder.strip()] = deps.split()
            elif kind == 'object':
                objects.append(rest.strip())
            else:
                sys.exit(f'check_layers: {path}:{n}: expected "layer FOLDER: ..." or "object PATH", got {line!r}')
    return layers, objects


def find_cycles(graph):
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_table(layers, problems):
    for folder, deps in layers.items():
        for d in deps:
            if d not in layers:
                problems.append(f'layer table: {folder} lists {d}, which is not a source folder of the table')
            if d == folder:
                problems.append(f'layer table: {folder} lists itself')
    for comp in find_cycles({f: set(d) for f, d in layers.items()}):
        problems.append('layer table: folders depend on each other in a loop: ' + ' -> '.join(comp))


def source_files(root, layers):
    files = {}
    for folder in layers:
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith(SOURCE_EXT) and os.path.isfile(os.path.join(d, name)):
                files[f'{folder}/{name}'] = folder
    return files


def check_includes(root, layers, problems):
    files = source_files(root, layers)
    by_name = collections.defaultdict(list)
    for path in files:
        by_name[os.path.basename(path)].append(path)
    for name, paths in sorted(by_name.items()):
        if len(paths) > 1 and name.endswith(('.h', '.cuh')):
            problems.append(f'header name {name} is used by several files ({", ".join(paths)}): includes would be ambiguous')
    graph = collections.defaultdict(set)
    for path, folder in sorted(files.items()):
        with open(os.path.join(root, path), errors='replace') as f:
            text = f.read()
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            line = text.count('\n', 0, m.start()) + 1
            own = f'{folder}/{target}'
            if own in files:
                resolved = own
            else:
                found = by_name.get(os.path.basename(target), [])
                if '/' in target or not found:
                    problems.append(f'{path}:{line}: #include "{target}" is no header of the source folders')
                    continue
                resolved = found[0]
            tfolder = files[resolved]
            if tfolder != folder and tfolder not in layers[folder]:
                problems.append(f'{path}:{line}: #include "{target}" reaches {tfolder}/, which {folder}/ may not use '
                                f'(allowed: {", ".join(layers[folder]) or "nothing"})')
            graph[path].add(resolved)
    for comp in find_cycles(graph):
        problems.append('files include each other in a loop: ' + ' -> '.join(comp))


def symbols(obj):
    out = subprocess.run(['nm', obj], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f'check_layers: nm {obj} failed: {out.stderr.strip()}')
    defined, undefined = set(), set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in 'TDBRVW':
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == 'U':
            undefined.add(parts[1])
    return defined, undefined


def object_folder(obj, layers):
    """The source folder of <build>/obj/<folder>/<file>.o, or None outside the table."""
    rel = ('/' + obj.replace(os.sep, '/')).split('/obj/', 1)[-1]
    folder = rel.rsplit('/', 1)[0] if '/' in rel else ''
    return folder if folder in layers else None


def check_calls(root, layers, objects, problems):
    owner, uses = {}, {}
    for obj in objects:
        path = obj if os.path.isabs(obj) else os.path.join(root, obj)
        if not os.path.isfile(path):
            problems.append(f'object {obj} is missing (build first)')
            continue
        defined, undefined = symbols(path)
        for s in defined:
            owner.setdefault(s, obj)
        uses[obj] = undefined
    graph = collections.defaultdict(set)
    via = {}
    for obj, undefined in uses.items():
        for s in sorted(undefined):
            target = owner.get(s)
            if not target or target == obj:
                continue
            graph[obj].add(target)
            via.setdefault((obj, target), s)
            f, tf = object_folder(obj, layers), object_folder(target, layers)
            if f and tf and f != tf and tf not in layers[f]:
                problems.append(f'{obj} calls {s} of {target}: {f}/ may not use {tf}/')
    for comp in find_cycles(graph):
        members = set(comp)
        edges = [f'{a} -> {b} ({via[(a, b)]})' for a in comp for b in sorted(graph[a]) if b in members]
        problems.append('files call each other in a loop: ' + '; '.join(edges))


def main():
    if len(sys.argv) != 3:
        print(__doc__.split('\n\n')[0], file=sys.stderr)
        print('usage: check_layers.py ROOT MANIFEST', file=sys.stderr)
        return 2
    root, manifest = sys.argv[1], sys.argv[2]
    layers, objects = read_manifest(manifest)
    if not layers:
        print(f'check_layers: {manifest} lists no layer', file=sys.stderr)
        return 2
    problems = []
    check_table(layers, problems)
    check_includes(root, layers, problems)
    check_calls(root, layers, objects, problems)
    for p in problems:
        print(p)
    if not problems:
        print(f'layers: {len(layers)} folders, {len(objects)} objects: every include and call points down, no loops')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

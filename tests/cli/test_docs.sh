#!/usr/bin/env bash
# test_docs.sh — the generated parts of docs/ match the code, and the README shows the two
# commands that .ci/run and users rely on.
source "$CT_ROOT/tests/cli/lib.sh"

"$CTRAIN" train --help-markdown >keys.md
awk '/<!-- keys:begin -->/{on=1; next} /<!-- keys:end -->/{on=0} on' "$CT_ROOT/docs/configuration.md" >doc_keys.md
if diff -u doc_keys.md keys.md >diff.txt; then pass configuration_md_matches_key_table
else fail configuration_md_matches_key_table "docs/configuration.md is stale; run 'make docs': $(head -c 600 diff.txt)"; fi

# Every key of the table appears in --help.
"$CTRAIN" train --help >help.txt
missing=$(grep -oE '^\| `[a-z0-9_]+`' keys.md | tr -d '|` ' | while read -r k; do grep -q "^  $k " help.txt || echo "$k"; done)
if [ -z "$missing" ]; then pass help_lists_every_key; else fail help_lists_every_key "missing: $missing"; fi

expect_grep readme_shows_test_command 'make test' "$CT_ROOT/README.md"
expect_grep readme_shows_demo_command 'scripts/demo.sh' "$CT_ROOT/README.md"
expect_grep ci_runs_make_test '^make test' "$CT_ROOT/.ci/run"
for doc in data-format.md configuration.md architecture.md; do
    if [ -s "$CT_ROOT/docs/$doc" ]; then pass "doc_exists_$doc"; else fail "doc_exists_$doc" "docs/$doc missing"; fi
done

# Every source path the docs name exists (globs allowed), so the docs follow the tree.
python3 - "$CT_ROOT" >paths.txt 2>paths.err <<'PY'
import glob, os, re, sys
root = sys.argv[1]
docs = glob.glob(f'{root}/docs/*.md') + [f'{root}/README.md', f'{root}/kernels/README.md', f'{root}/tests/gpu_emu/README.md']
# (a path followed by "<" is a template such as kernels/cpu/cpu_<family>.c, not a file)
pat = re.compile(r'(?<![\w./-])((?:src|kernels|checkpoint|tests|scripts|slurm)/[\w./*-]*[\w*])(?![\w./*<-])')
checked = 0
for doc in docs:
    for n, line in enumerate(open(doc), 1):
        for p in pat.findall(line):
            checked += 1
            if not glob.glob(os.path.join(root, p)):
                print(f'{os.path.relpath(doc, root)}:{n}: {p}')
print(f'checked {checked} paths in {len(docs)} docs')
PY
rc=$?
# the helper must have run to its end (it prints the number of paths it checked last)
if [ $rc -ne 0 ]; then fail docs_name_existing_paths "the path checker exited with status $rc: $(tail -c 600 paths.err | tr '\n' ' ')"
elif ! grep -qE '^checked [1-9][0-9]* paths in [1-9][0-9]* docs$' paths.txt; then
    fail docs_name_existing_paths "the path checker did not finish: $(tail -c 400 paths.txt)"
elif grep -v '^checked ' paths.txt >missing.txt; then fail docs_name_existing_paths "$(head -c 800 missing.txt)"
else pass docs_name_existing_paths; fi

finish

"""One module per doit verb: what the verb does, with no doit in it (tasks.py wires them).

workspace.py  the catalog and store of this process, plans, errors pinned to recipe lines
variables.py  command-line variables: every verb's table, typed, no unknown name ignored
help.py       `doit help`: kiln's verbs first; `doit help VERB`: its variables and examples
build.py      plan recipes, ready the hub (tinyhub), run steps, record manifests, ensure_bundle
summary.py    what one `doit build` did, per recipe: verdict, steps run and reused, bundle
plancache.py  what a build planned, cached in the store by everything planning reads
check.py      the catalog, its manifests and its rules, every problem at once
plan.py       what a build would run, with step keys and why each is stale
status.py     where each recipe stands: verdict here and elsewhere, stale, built here
diff.py       what a PR changes, as Markdown or JSON; fails when it adds problems
run.py        run a recipe's bundle (runtime.open, imported inside the function)
new.py        write a recipe for a checkpoint from its config, as `doit check` accepts it
export.py     a validated bundle out of the store: manifest, model card, runtime example
sources.py    what new reads of a model= source: pinned by content, config, chat template
verify.py     re-hash the store against its records and the manifests' locks
gc.py         remove what no manifest and no current plan references
upkeep.py     what verify and gc both need: the keys manifests and plans reference
schema.py     the editor JSON Schemas in schema/
diffing.py    what a change does, recipe by recipe: fields, rebuilds, evidence, matrix cells

`doit site`/`doit serve` are kiln/site (its command() functions); `doit replay` is
kiln/replay (driver.command).
"""

"""One module per step kind, each with one entry point: `build(request, writer)`.

Which module builds a step (kiln.plan.toolchain.builder_module): `builders.fetch` for
the one shared step; for a text-generation engine, the backend module
`builders.causal_lm.backends.<backend>`; otherwise `builders.<family>.<kind>`, the
family being the recipe task's (kiln.schema.FAMILY). A step's key covers that
module's import closure, so a new helper needs no table edit.

Builders import their heavy libraries inside `build()`, read their inputs from
`request.inputs`, and write only through `writer`. Options are validated by each
builder's own pydantic `Options` model.
"""

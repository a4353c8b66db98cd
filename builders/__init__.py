"""One module per step kind, each with one entry point: `build(request, writer)`.

Builders import their heavy libraries inside `build()`, read their inputs from
`request.inputs`, and write only through `writer`. Options are validated by each
builder's own pydantic `Options` model.
"""

"""`doit serve`: the site on 127.0.0.1, and with `recipe=NAMES` an OpenAI-compatible
API at /v1 for those built recipes (issue 41, items 1-2). The stage right of
commands/ and site/: it serves what they built and rendered.

  command.py  `doit serve`: the site alone (kiln.site.serve), or the site and the API under uvicorn
  app.py      the Starlette app: routes, the body cap, OpenAI-shaped errors, server-sent events
  wire.py     the request bodies (pydantic, field by field) and the answers' JSON shapes
  models.py   the served recipes: each bundle found in the store, opened once, run per request
"""

"""One module per doit verb: what the verb does, with no doit in it (tasks.py wires them).

review.py   staleness and the PR diff, shared by check, plan and diff
upkeep.py   verify and gc
schema.py   the editor JSON Schemas in schema/
"""

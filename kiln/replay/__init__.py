"""Nightly replay: rebuild and re-measure a selection of recipes, compare each new
evidence record with the previous one of the same recipe and host class, and report
what changed (Markdown + JUnit XML) with an exit code: 0 all good, 1 regressions,
2 infrastructure failure.

  select.py        which recipes (all, recipes=, tags=, changed_since=, shard=i/n)
  jobs.py          a recipe's steps and the resources its chain needs
  chain.py         run one chain: steps in child processes, timeouts, bounded retries
  step.py          the child process that runs one step
  ray_executor.py  the chains as Ray tasks (ray imported there only)
  hostclass.py     the host class evidence is compared within (CPU model and cores, or GPU)
  compare.py       verdict changes, new failures, fixes, metric moves, slower steps
  report.py        report.md, junit.xml, replay.json
  driver.py        all of the above in order; the only writer of manifests and reports
"""

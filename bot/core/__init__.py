"""The records everything else shares: run records and verdicts (:mod:`.records`), the campaign state a policy
reads (:mod:`.state`), recipes and one-lever edits (:mod:`.recipe`), the lever catalog (:mod:`.levers`), the
diagnosis of a run (:mod:`.diagnosis`), the gate's loss band (:mod:`.band`), line-numbered data files and their
matchers (:mod:`.datafile`, :mod:`.matcher`) and where a repository keeps its data (:mod:`.repo`).

Imports nothing else of ``bot`` or ``gate``.
"""

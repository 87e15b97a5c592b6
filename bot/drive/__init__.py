"""Driving a campaign: the one executor (:mod:`.executor`, a handler per action), its ports and their local
implementations (:mod:`.ports`), and the local wiring and finish (:mod:`.local`). GitHub's ports are in
:mod:`bot.github.ports`.
"""

"""Driving a campaign: the one executor (:mod:`.executor`, a handler per action), its ports (:mod:`.ports`) and their
local implementations (:mod:`.local_ports`), and the local wiring and finish (:mod:`.local`). GitHub's ports are in
:mod:`bot.github.github_ports`.
"""

"""The campaign layer: the pure state machine (:mod:`.machine`), the gate as campaigns use it (:mod:`.gate_calls`),
how a campaign measures on each kind of machine (:mod:`.setup`), the step and campaign reports (:mod:`.report`)
and TrainingThroughputBench (:mod:`.leaderboard`).

``from bot import campaign as cm`` gives the machine's whole vocabulary: ``cm.advance`` and the records, actions
and events of :mod:`bot.core.state`.
"""

from bot.campaign.machine import *  # noqa: F403
from bot.campaign.machine import advance  # noqa: F401
from bot.core.state import *  # noqa: F403
from bot.core.state import confirmed_tps  # noqa: F401

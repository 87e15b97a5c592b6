"""The default policy's moves, in the order they are asked (the first proposal wins).

The obligations -- moves that continue an open chain: the re-aimed jump, the out-of-memory retry, the enabled change,
the follow-up, restoring a schedule -- keep this fixed order among themselves; the opportunities sit where the
policy's rules put them (the ``ranked`` policy orders them by the one score instead)."""

from __future__ import annotations

from bot.agent.heuristic.enabled_change import EnabledChange
from bot.agent.heuristic.explore import Explore, PatienceStop
from bot.agent.heuristic.follow_up import FollowUp
from bot.agent.heuristic.from_lessons import HeldBackLessons
from bot.agent.heuristic.jump import LayoutJump, LayoutJumpAtAThird
from bot.agent.heuristic.jump_review import JumpReview
from bot.agent.heuristic.keep_going import KeepGoing
from bot.agent.heuristic.less_recompute import LessRecompute
from bot.agent.heuristic.lessons_first import LessonsFirst
from bot.agent.heuristic.model_guided import ModelGuided
from bot.agent.heuristic.move import Move
from bot.agent.heuristic.oom_retry import OomRetry
from bot.agent.heuristic.push_further import PushFurther
from bot.agent.heuristic.reaimed_jump import ReaimedJump
from bot.agent.heuristic.restore_schedule import RestoreSchedule
from bot.agent.heuristic.screen_check import ScreenCheck
from bot.agent.heuristic.second_pass import SecondPass

MOVES: tuple[Move, ...] = (
    ReaimedJump(),
    OomRetry(),
    EnabledChange(),
    FollowUp(),
    PushFurther(),
    KeepGoing(),
    RestoreSchedule(),
    SecondPass(just_kept=True),
    LessRecompute(),
    JumpReview(),
    LayoutJumpAtAThird(),
    LessonsFirst(),
    HeldBackLessons(),
    ModelGuided(),
    SecondPass(),
    LayoutJump(),
    ScreenCheck(),
    PatienceStop(),
    Explore(),
)
OBLIGATIONS: tuple[str, ...] = tuple(m.id for m in MOVES if m.obligation)

# asked in this order only when no ranked opportunity proposes: the late second pass and the late layout jump (their
# own rule: once no diagnosis- or lesson-driven move is left), then the patience stop, then exploration
LAST_RESORT: tuple[str, ...] = ("second-pass", "layout-jump", "screen-check", "patience-stop", "explore")

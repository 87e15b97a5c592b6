"""bot.agent.lessons: the seed catalog, matching and ordering, malformed files, proposed lessons."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.agent.lessons import (
    Lesson,
    LessonFileError,
    find_lesson,
    lever_names,
    load_lessons,
    propose_lessons,
    relevant,
    render_lesson,
    render_table,
    write_proposed,
)
from bot.core.datafile import load_entries

ROOT = Path(__file__).resolve().parents[2]
LESSONS = load_lessons()
BY_ID = {lesson.id: lesson for lesson in LESSONS}


def gpu_ctx(**over: object) -> dict[str, object]:
    ctx: dict[str, object] = {
        "diagnosis.outcome": "ok",
        "diagnosis.mem_headroom_frac": 0.1,
        "diagnosis.tps_cv": 0.02,
        "diagnosis.simulated": False,
        "recipe.hardware": "h100-sxm-80gb",
        "recipe.devices": 8,
        "recipe.model": "llama3-8b",
        "recipe.moe": False,
        "recipe.grad_accum_steps": 1,
        "recipe.global_batch_pinned": True,
        "stack.torch": "2.14.0.dev20260815+cu130",
        "stack.torchtitan": "0.3.0",
        "levers.activation_checkpoint": "selective",
        "levers.training.local_batch_size": 1,
        "levers.compile.enable": False,
        "levers.compile.enable_async_tensor_parallel": False,
        "levers.parallelism.tensor_parallel_degree": 1,
        "levers.parallelism.pipeline_parallel_degree": 1,
        "levers.parallelism.fsdp_reshard_after_forward": "default",
        "levers.profiler.enable_profiling": False,
        "levers.training.gc_freq": 50,
    }
    ctx.update(over)
    return ctx


def cpu_ctx(**over: object) -> dict[str, object]:
    ctx = gpu_ctx(
        **{
            "recipe.hardware": "cpu",
            "recipe.devices": 1,
            "recipe.model": "llama3-debug",
            "recipe.tokens_per_microbatch": 512,
            "diagnosis.mem_headroom_frac": 0.6,
            "levers.activation_checkpoint": "none",
            "levers.env.OMP_NUM_THREADS": 2,
        }
    )
    ctx.update(over)
    return ctx


def ids(lessons: list[Lesson]) -> list[str]:
    return [lesson.id for lesson in lessons]


# --------------------------------------------------------------------------- the seed catalog


def test_seed_catalog_loads_with_at_least_15_cited_lessons() -> None:
    assert len(LESSONS) >= 15
    assert len(BY_ID) == len(LESSONS)
    for lesson in LESSONS:
        assert lesson.source.startswith("https://"), lesson.id
        assert lesson.why
        assert lesson.status == "curated"


def test_topic_files_exist() -> None:
    names = {p.name for p in (ROOT / "lessons").glob("*.yaml")}
    assert {"memory.yaml", "parallelism.yaml", "compile.yaml", "cpu.yaml", "moe.yaml"} <= names


def test_oom_recompute_lesson_is_highest_priority() -> None:
    top = max(LESSONS, key=lambda lesson: lesson.priority)
    assert top.id == "oom-enable-recompute"
    assert [c.value for c in top.try_] == ["selective", "full"]


@pytest.mark.parametrize(
    "ctx",
    [
        gpu_ctx(**{"diagnosis.outcome": "oom", "levers.activation_checkpoint": "none"}),
        gpu_ctx(**{"diagnosis.outcome": "oom", "levers.parallelism.fsdp_reshard_after_forward": "never"}),
        cpu_ctx(**{"diagnosis.outcome": "oom", "levers.profiler.enable_profiling": True}),
        {"diagnosis.outcome": "oom"},  # a bare diagnosis still gets it
    ],
)
def test_oom_lesson_is_first_for_an_oom_diagnosis(ctx: dict[str, object]) -> None:
    assert ids(relevant(LESSONS, ctx))[0] == "oom-enable-recompute"


def test_oom_with_full_recompute_moves_on_to_cheaper_fixes() -> None:
    ctx = gpu_ctx(
        **{
            "diagnosis.outcome": "oom",
            "levers.activation_checkpoint": "full",
            "levers.training.local_batch_size": 2,
        }
    )
    found = ids(relevant(LESSONS, ctx))
    assert "oom-enable-recompute" not in found
    assert found[:2] == ["oom-expandable-segments", "oom-halve-local-batch"]
    one = gpu_ctx(**{"diagnosis.outcome": "oom", "levers.activation_checkpoint": "full"})
    found = ids(relevant(LESSONS, one, include_manual=False))
    assert found.index("oom-raise-tensor-parallel") < found.index("oom-cpu-offload-last-resort")
    assert found[-1] == "oom-cpu-offload-last-resort"


def test_relevant_is_ordered_by_priority() -> None:
    found = relevant(LESSONS, gpu_ctx(**{"levers.profiler.enable_profiling": True}))
    priorities = [lesson.priority for lesson in found]
    assert priorities == sorted(priorities, reverse=True)
    assert ids(found)[0] == "profiler-off-when-benchmarking"
    assert "compile-on-gpu" in ids(found)


def test_hardware_scoping() -> None:
    gpu = ids(relevant(LESSONS, gpu_ctx()))
    cpu = ids(relevant(LESSONS, cpu_ctx(**{"levers.compile.enable": True})))
    assert "compile-on-gpu" in gpu and "compile-on-gpu" not in cpu
    assert "cpu-compile-brings-nothing" in cpu and "cpu-compile-brings-nothing" not in gpu


def test_cpu_lessons() -> None:
    found = ids(
        relevant(
            LESSONS,
            cpu_ctx(
                **{
                    "levers.activation_checkpoint": "selective",
                    "levers.env.OMP_NUM_THREADS": 1,
                    "recipe.tokens_per_microbatch": 256,
                }
            ),
        )
    )
    assert found[:3] == ["cpu-ac-off", "cpu-use-both-cores", "cpu-microbatch-at-least-512-tokens"]


@pytest.mark.parametrize(("tokens", "fires"), [(256, True), (512, True), (2048, False)])
def test_compile_off_is_proposed_on_cpu_only_at_small_micro_batches(tokens: int, fires: bool) -> None:
    # no gain measured at 256 tokens per micro-batch; +12% to +18% at 2,048 (the lesson's evidence)
    found = ids(relevant(LESSONS, cpu_ctx(**{"levers.compile.enable": True, "recipe.tokens_per_microbatch": tokens})))
    assert ("cpu-compile-brings-nothing" in found) == fires


def test_headroom_lessons() -> None:
    found = ids(
        relevant(
            LESSONS, gpu_ctx(**{"levers.activation_checkpoint": "full", "diagnosis.mem_headroom_frac": 0.4})
        )
    )
    assert "ac-full-to-selective-with-headroom" in found
    assert "reshard-never-when-memory-allows" in found
    tight = ids(
        relevant(
            LESSONS, gpu_ctx(**{"levers.activation_checkpoint": "full", "diagnosis.mem_headroom_frac": 0.05})
        )
    )
    assert "ac-full-to-selective-with-headroom" not in tight


def test_parallelism_and_moe_lessons() -> None:
    pp = gpu_ctx(
        **{
            "levers.parallelism.pipeline_parallel_degree": 4,
            "levers.parallelism.pipeline_parallel_schedule": "1f1b",
            "levers.parallelism.pipeline_parallel_microbatch_size": 2,
            "diagnosis.breakdown.bubble_frac": 0.3,
        }
    )
    found = ids(relevant(LESSONS, pp))
    assert "pp-interleaved-1f1b" in found and "pp-more-microbatches" in found
    tp = ids(relevant(LESSONS, gpu_ctx(**{"levers.parallelism.tensor_parallel_degree": 8})))
    assert tp.index("async-tp-needs-compile") < tp.index("compile-on-gpu")
    moe = ids(
        relevant(LESSONS, gpu_ctx(**{"recipe.moe": True, "levers.parallelism.expert_parallel_degree": 1}))
    )
    assert "ep-for-moe" in moe


@pytest.mark.parametrize(("ep", "per_node", "exposed", "fires"), [
    (4, 8, 0.41, True),    # EP 8 still fits the node: widen it
    (2, 8, 0.15, True),
    (8, 8, 0.41, False),   # twice EP would cross nodes (ep-within-node's side)
    (4, 4, 0.41, False),
    (4, 8, 0.10, False),   # little exposed communication: nothing to trade
    (1, 8, 0.41, False),   # no EP yet: ep-for-moe's case
])
def test_ep_widens_within_the_node_only_while_twice_the_group_fits_and_communication_is_exposed(ep, per_node, exposed, fires) -> None:
    ctx = gpu_ctx(**{"recipe.moe": True, "levers.parallelism.expert_parallel_degree": ep, "recipe.devices_per_node": per_node,
                     "recipe.expert_parallel_groups_per_node": per_node / ep, "diagnosis.breakdown.exposed_comm_frac": exposed})
    assert ("ep-widen-within-node" in ids(relevant(LESSONS, ctx))) is fires


def test_manual_lessons_can_be_excluded() -> None:
    ctx = cpu_ctx()
    assert "cpu-fp32-params-on-avx2" in ids(relevant(LESSONS, ctx))
    assert "cpu-fp32-params-on-avx2" not in ids(relevant(LESSONS, ctx, include_manual=False))
    assert not BY_ID["float8-is-a-precision-change"].auto_propose


def test_stack_range_excludes_only_known_versions() -> None:
    lesson = Lesson.model_validate(
        {
            "id": "only-old",
            "try": [{"lever": "compile.enable", "value": True}],
            "why": "w",
            "source": "https://e.org",
            "applies_to": {"stack": {"torchtitan": "<0.3"}},
        }
    )
    assert relevant([lesson], {"stack.torchtitan": "0.2.2"}) == [lesson]
    assert relevant([lesson], {"stack.torchtitan": "0.3.0"}) == []
    assert relevant([lesson], {}) == [lesson]


def test_lever_names_and_find() -> None:
    names = lever_names(LESSONS)
    assert {"activation_checkpoint", "training.local_batch_size", "compile.enable"} <= names
    assert find_lesson(LESSONS, "oom-enable-recompute") is BY_ID["oom-enable-recompute"]
    assert find_lesson(LESSONS, "nope") is None


def test_render() -> None:
    text = render_lesson(BY_ID["oom-enable-recompute"])
    assert text.startswith("oom-enable-recompute  (priority 100, curated)")
    assert "1. activation_checkpoint = 'selective'" in text
    assert "2. activation_checkpoint = 'full'" in text
    assert "when:       all(diagnosis.outcome == 'oom', not(levers.activation_checkpoint == 'full'))" in text
    assert "source:     https://" in text
    table = render_table(LESSONS)
    lines = table.splitlines()
    assert lines[0].split() == ["ID", "PRI", "TRY", "SOURCE"]
    assert len(lines) == len(LESSONS) + 1
    assert "(manual)" in table


# --------------------------------------------------------------------------- malformed files

GOOD = """\
lessons:
  - id: good-one
    when: {field: diagnosis.outcome, op: eq, value: oom}
    try:
      - {lever: activation_checkpoint, value: full}
    why: because
    source: https://example.org/why
"""


def folder_with(tmp_path: Path, body: str, name: str = "topic.yaml") -> Path:
    (tmp_path / name).write_text(body, encoding="utf-8")
    return tmp_path


def lesson_error(folder: Path) -> str:
    with pytest.raises(LessonFileError) as info:
        load_lessons(folder)
    return str(info.value)


def test_good_file_loads(tmp_path: Path) -> None:
    assert ids(load_lessons(folder_with(tmp_path, GOOD))) == ["good-one"]


@pytest.mark.parametrize(
    ("old", "new", "field", "needle"),
    [
        ("    why: because\n", "", "why", "required field is missing"),
        ("op: eq", "op: is", "when.op", "expected 'eq'"),
        ("value: full}", "value: full, op: double}", "try.0", "exactly one of 'value' or 'op'"),
        (
            "{lever: activation_checkpoint, value: full}",
            "{lever: activation_checkpoint, op: triple}",
            "try.0.op",
            "double",
        ),
        ("https://example.org/why", "ftp://example.org", "source", "https:// URL or a repository path"),
        ("    why: because\n", "    why: because\n    priority: high\n", "priority", "valid integer"),
        (
            "    why: because\n",
            "    why: because\n    applies_to: {hardware: h100}\n",
            "applies_to.hardware",
            "valid list",
        ),
        (
            "    why: because\n",
            "    why: because\n    applies_to: {stack: {torch: '>>2'}}\n",
            "applies_to.stack.torch",
            "PEP 440",
        ),
        (
            "    try:\n      - {lever: activation_checkpoint, value: full}\n",
            "    try: []\n",
            "(the entry itself)",
            "at least one lever change",
        ),
    ],
)
def test_malformed_lessons_name_file_lesson_and_field(
    tmp_path: Path, old: str, new: str, field: str, needle: str
) -> None:
    assert old in GOOD
    folder = folder_with(tmp_path, GOOD.replace(old, new))
    msg = lesson_error(folder)
    assert str(folder / "topic.yaml") in msg, msg
    assert "lesson 0 (id 'good-one')" in msg, msg
    assert f"field '{field}'" in msg, msg
    assert needle in msg, msg


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    folder_with(tmp_path, GOOD, "a.yaml")
    folder_with(tmp_path, GOOD, "b.yaml")
    msg = lesson_error(tmp_path)
    assert "b.yaml" in msg and "duplicate id" in msg and "a.yaml" in msg


def test_missing_folder(tmp_path: Path) -> None:
    assert "lessons folder not found" in lesson_error(tmp_path / "nope")


def test_repository_path_sources_are_accepted() -> None:
    lesson = Lesson.model_validate(
        {
            "id": "x",
            "try": [{"lever": "a", "op": "next"}],
            "why": "w",
            "source": "results/llama3-8b/cpu/run-1.json",
        }
    )
    assert lesson.source.startswith("results/")
    with pytest.raises(ValueError):
        Lesson.model_validate(
            {"id": "x", "try": [], "why": "w", "source": "../etc/passwd", "auto_propose": False}
        )


# --------------------------------------------------------------------------- proposed lessons

MEASURED = [
    {
        "lever": "training.local_batch_size",
        "from": 2,
        "to": 4,
        "gain": 0.12,
        "kept": True,
        "record": "results/llama3-debug/cpu/0003.json",
        "hardware": "cpu",
        "model": "llama3-debug",
    },
    {
        "lever": "training.local_batch_size",
        "from": 2,
        "to": 4,
        "gain": 0.08,
        "kept": True,
        "record": "results/llama3-debug/cpu/0007.json",
        "hardware": "cpu",
        "model": "llama3-debug",
    },
    {
        "lever": "compile.enable",
        "from": False,
        "to": True,
        "gain": -0.05,
        "kept": False,
        "record": "results/llama3-debug/cpu/0004.json",
        "hardware": "cpu",
        "model": "llama3-debug",
    },
    {
        "lever": "activation_checkpoint",
        "from": "selective",
        "to": "none",
        "gain": 0.3,
        "kept": False,
        "record": "results/llama3-debug/cpu/0005.json",
        "hardware": "cpu",
        "model": "llama3-debug",
    },
]


def test_propose_lessons_from_kept_gains() -> None:
    proposed = propose_lessons(MEASURED)
    assert len(proposed) == 1
    lesson = proposed[0]
    assert lesson["status"] == "proposed"
    assert lesson["source"] == "results/llama3-debug/cpu/0003.json"
    assert "0007.json" in lesson["evidence"]
    assert lesson["try"] == [{"lever": "training.local_batch_size", "value": 4}]
    assert lesson["when"] == {"field": "levers.training.local_batch_size", "op": "eq", "value": 2}
    assert lesson["applies_to"] == {"models": ["llama3-debug"], "hardware": ["cpu"]}
    assert lesson["priority"] == 10 and "+10.0%" in lesson["why"]
    parsed = Lesson.model_validate(lesson)
    ctx = {"levers.training.local_batch_size": 2, "recipe.model": "llama3-debug", "recipe.hardware": "cpu"}
    assert relevant([parsed], ctx) == []  # proposed lessons need an explicit opt-in
    assert relevant([parsed], ctx, include_proposed=True) == [parsed]


def test_propose_lessons_validates_input() -> None:
    with pytest.raises(ValueError):
        propose_lessons([{**MEASURED[0], "record": "/abs/path.json"}])
    with pytest.raises(ValueError):
        propose_lessons([{k: v for k, v in MEASURED[0].items() if k != "gain"}])


def test_write_proposed_round_trips_and_merges(tmp_path: Path) -> None:
    target = tmp_path / "proposed" / "campaign-1.yaml"
    first = propose_lessons(MEASURED)
    write_proposed(first, target)
    loaded = load_entries(target, "lessons", Lesson, LessonFileError, kind="lesson")
    assert [lesson.id for lesson in loaded] == [first[0]["id"]]
    assert loaded[0].status == "proposed"
    assert loaded[0] == Lesson.model_validate(first[0])
    more = propose_lessons(
        [{**MEASURED[0], "lever": "training.gc_freq", "from": 50, "to": 100, "gain": 0.03}]
    )
    write_proposed(more, target)
    assert len(load_lessons(target.parent)) == 2
    write_proposed(more, target, merge=False)
    assert len(load_lessons(target.parent)) == 1
    assert sorted(p.name for p in target.parent.iterdir()) == ["campaign-1.yaml"]  # no temp files left


def test_write_proposed_writes_nothing_when_a_lesson_is_bad(tmp_path: Path) -> None:
    target = tmp_path / "p.yaml"
    write_proposed(propose_lessons(MEASURED), target)
    before = target.read_text(encoding="utf-8")
    with pytest.raises(ValueError):
        write_proposed([{"id": "bad lesson id", "try": [], "why": "", "source": "x"}], target)
    assert target.read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


@pytest.mark.parametrize(("comm", "fires"), [(None, True), (0.05, True), (0.15, False), (0.4, False)])
def test_pipeline_off_is_not_tried_where_communication_is_already_exposed(comm: float | None, fires: bool) -> None:
    """PP off multiplies the FSDP group by p: with 15 % or more of the step in exposed communication it only adds to
    it (deepseek-v3 on 256 H200: PP 8 -> 1 measured -63 %). A missing breakdown (a CPU run) does not hold it back."""
    over = {"levers.parallelism.pipeline_parallel_degree": 8, "diagnosis.mem_headroom_frac": 0.2}
    if comm is not None:
        over["diagnosis.breakdown.exposed_comm_frac"] = comm
    assert ("pp-off-when-fsdp-may-fit" in ids(relevant(LESSONS, gpu_ctx(**over)))) == fires


@pytest.mark.parametrize(("schedule", "ac", "bubble", "fires"),
                         [("Interleaved1F1B", "none", 0.12, True), ("1F1B", "none", 0.3, True), ("Interleaved1F1B", "selective", 0.3, False),
                          ("Interleaved1F1B", "none", 0.02, False), ("InterleavedZeroBubble", "none", 0.3, False)])
def test_interleaved_zero_bubble_only_without_recompute_and_with_a_bubble_left(schedule: str, ac: str, bubble: float, fires: bool) -> None:
    """InterleavedZeroBubble with activation checkpointing runs at a tenth of Interleaved1F1B (torchtitan#773): the
    lesson asks for it only without recompute, with a bubble worth removing, and ahead of Interleaved1F1B."""
    ctx = gpu_ctx(**{"levers.parallelism.pipeline_parallel_degree": 8, "levers.parallelism.pipeline_parallel_schedule": schedule,
                     "levers.activation_checkpoint": ac, "diagnosis.breakdown.bubble_frac": bubble})
    found = ids(relevant(LESSONS, ctx))
    assert ("pp-interleaved-zero-bubble-without-recompute" in found) == fires
    if fires and "pp-interleaved-1f1b" in found:
        assert found.index("pp-interleaved-zero-bubble-without-recompute") < found.index("pp-interleaved-1f1b")

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainer.rl.buffer import ReplayBuffer
from trainer.rl.episode import Completion, Group

from contract.problem import Invalid


def group(index: int, *versions: int) -> Group:
    completions = tuple(Completion(prompt=(1,), response=(2,), logprobs=(-1.0,), version=v) for v in versions)
    n = len(completions)
    return Group(prompt_index=index, completions=completions, rewards=(1.0,) * n, advantages=(0.5,) * n)


def test_a_group_older_than_the_bound_is_evicted_counted_and_issued_again() -> None:
    buffer = ReplayBuffer(max_policy_age=1)
    a, b, c = buffer.issue(3)
    buffer.add(group(a, 0))
    buffer.add(group(b, 2, 1))  # generation spanned an update: as old as version 1
    buffer.add(group(c, 2))
    assert buffer.sample(3, 3) is None  # the two old ones are gone: only one group left
    assert buffer.counters.dropped_stale == 2
    assert buffer.issue(3) == [a, b, 3]  # the evicted prompts first, then new ones
    assert buffer.counters.reissued == 2


def test_sample_returns_exact_sizes_oldest_first() -> None:
    buffer = ReplayBuffer(max_policy_age=2)
    for i in buffer.issue(5):
        buffer.add(group(i, 1))
    assert buffer.sample(1, 6) is None
    first = buffer.sample(1, 2)
    assert first is not None
    assert [g.prompt_index for g in first] == [0, 1]
    second = buffer.sample(3, 3)
    assert second is not None
    assert [g.prompt_index for g in second] == [2, 3, 4]
    assert buffer.counters.max_sampled_age == 2
    assert buffer.counters.age_violations == 0
    with pytest.raises(ValueError, match="batch size 0"):
        buffer.sample(3, 0)


operations = st.lists(
    st.tuples(st.sampled_from(["issue", "add", "sample", "tick"]), st.integers(0, 6), st.integers(0, 3)),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(bound=st.integers(0, 3), ops=operations)
def test_sample_never_returns_a_group_older_than_the_bound(bound: int, ops: list[tuple[str, int, int]]) -> None:
    buffer = ReplayBuffer(max_policy_age=bound)
    version, issued, evicted = 0, [], 0
    for op, n, lag in ops:
        if op == "issue":
            issued += buffer.issue(n)
        elif op == "add" and issued:
            buffer.add(group(issued.pop(0), max(0, version - lag), version))
        elif op == "tick":
            version += 1
        elif op == "sample":
            before = buffer.counters.dropped_stale
            waiting = len(buffer)
            got = buffer.sample(version, n + 1)
            evicted += buffer.counters.dropped_stale - before
            if got is not None:
                assert len(got) == n + 1
                assert all(0 <= g.age(version) <= bound for g in got)
                buffer.trained(got)
            else:
                assert waiting - (buffer.counters.dropped_stale - before) < n + 1
    assert buffer.counters.age_violations == 0
    assert buffer.counters.dropped_stale == evicted
    assert buffer.counters.max_sampled_age <= bound


def test_state_round_trip_reissues_exactly_the_indices_in_flight() -> None:
    buffer = ReplayBuffer(max_policy_age=1)
    indices = buffer.issue(6, owner="gen-0")  # 0..5
    buffer.add(group(0, 0))
    buffer.add(group(1, 0))
    buffer.drop_zero_advantage(2)  # done: never issued again
    trained = buffer.sample(0, 1)
    assert trained is not None
    buffer.trained(trained)  # index 0 done
    buffer.sample(0, 1)  # index 1 sampled, its step not committed
    # in flight now: 1 (sampled), 3, 4, 5 (outstanding)
    state = json.loads(json.dumps(buffer.state_dict()))
    assert state["cursor"] == 6
    assert state["pending"] == [1, 3, 4, 5]
    resumed = ReplayBuffer(max_policy_age=1)
    resumed.load_state_dict(state)
    assert resumed.issue(6) == [1, 3, 4, 5, 6, 7]
    assert resumed.counters.trained == 1
    assert resumed.counters.dropped_zero_advantage == 1
    assert indices == [0, 1, 2, 3, 4, 5]


def test_a_dead_generators_prompts_are_issued_again_and_its_late_answers_dropped() -> None:
    buffer = ReplayBuffer()
    mine, theirs = buffer.issue(2, owner="a"), buffer.issue(2, owner="b")
    buffer.add(group(mine[0], 0))
    assert buffer.release("a") == [mine[1]]
    assert buffer.issue(1, owner="b") == [mine[1]]
    assert not buffer.add(group(mine[0], 0))  # already back once: a duplicate is not kept
    assert buffer.counters.dropped_unknown == 1
    assert buffer.pending() == [*mine, *theirs]


@pytest.mark.parametrize(
    "state",
    [
        None,
        {"cursor": 3, "pending": [1]},
        {"cursor": -1, "pending": [], "counters": {}},
        {"cursor": 3, "pending": [3], "counters": {}},
        {"cursor": 3, "pending": [1, 1], "counters": {}},
        {"cursor": True, "pending": [], "counters": {}},
    ],
)
def test_a_forged_state_is_one_line(state: object) -> None:
    buffer = ReplayBuffer()
    good = buffer.state_dict()["counters"]
    if isinstance(state, dict) and "counters" in state:
        state = state | {"counters": good}
    with pytest.raises(Invalid) as error:
        buffer.load_state_dict(state, where="checkpoint step 40: rl.buffer")
    assert len(error.value.lines) == 1
    assert error.value.lines[0].startswith("checkpoint step 40: rl.buffer: ")


def test_forged_counters_are_refused() -> None:
    state = ReplayBuffer().state_dict()
    state["counters"]["trained"] = -4
    with pytest.raises(Invalid, match="counters"):
        ReplayBuffer().load_state_dict(state)
    with pytest.raises(ValueError, match="max_policy_age -1"):
        ReplayBuffer(max_policy_age=-1)

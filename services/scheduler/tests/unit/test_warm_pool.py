"""Warm runner bookkeeping with no processes: the sandbox shape of a run (what of its config
its sandbox is built from), and the pool's sizes, cap, matching, learning and backoff."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events import RunConfig
from nexus_scheduler.runtime.confinement import UNCONFINED, Confinement, Endpoint, RunShape
from nexus_scheduler.runtime.warm_pool import (
    BACKOFF_MAX_SECONDS,
    PoolSizesError,
    WarmPool,
    parse_sizes,
)

ENV = {"NEXUS_NATS_URL": "nats://nats.example:4222", "PATH": "/usr/bin:/bin", "HOME": "/h"}


def _config(run_id: str = "r1", **overrides: Any) -> RunConfig:
    body: dict[str, Any] = {
        "run_id": run_id,
        "agent_id": "a",
        "system_prompt": "s",
        "model": {"name": "m", "base_url": "https://model.example/v1"},
    }
    body.update(overrides)
    return RunConfig.model_validate(body)


def shape(config: RunConfig, env: dict[str, str] | None = None) -> RunShape:
    return Confinement("/usr/bin/bwrap", readable=()).shape(
        ("/usr/bin/python3", "-m", "nexus_runner"), config, env or ENV
    )


def test_runs_differing_only_in_their_own_values_have_one_shape() -> None:
    one = shape(_config("r1", input="fix it", system_prompt="a"))
    two = shape(_config("r2", agent_id="b", input="other", system_prompt="b"))
    assert one == two
    assert Endpoint("model.example", 443) in one.endpoints
    assert Endpoint("nats.example", 4222) in one.endpoints


@pytest.mark.parametrize(
    "change",
    [
        {"model": {"name": "m", "base_url": "https://other-model.example/v1"}},
        {"repo": {"url": "https://git.example/o/r.git"}},
        {"egress": [{"host": "pypi.org"}]},
        {
            "mcp_servers": [
                {"name": "s", "transport": "stdio", "command": "/bin/sh", "tools": ["t"]}
            ]
        },
    ],
)
def test_what_widens_a_sandbox_changes_the_shape(change: dict[str, Any]) -> None:
    assert shape(_config(**change)) != shape(_config())


def test_a_local_git_remote_is_writable_in_the_shape(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    remote.mkdir()
    with_remote = shape(_config(repo={"url": f"file://{remote}"}))
    assert with_remote.writable == (remote,)
    assert shape(_config()).writable == ()


def test_the_runner_s_environment_is_part_of_the_shape() -> None:
    github = shape(_config(), {**ENV, "NEXUS_GITHUB_TOKEN": "t"})
    assert Endpoint("api.github.com", 443) in github.endpoints
    assert github != shape(_config())


def test_wrap_run_is_wrap_shaped_of_its_shape(tmp_path: Path) -> None:
    confinement = Confinement("/usr/bin/bwrap", readable=())
    command = ("/usr/bin/python3", "-m", "nexus_runner")
    env = {**ENV, "HOME": str(tmp_path / "home"), "NEXUS_WORKSPACE_ROOT": str(tmp_path / "ws")}
    config = _config()
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    whole = confinement.wrap_run(command, config, env, run_dir)
    parts = confinement.wrap_shaped(
        command,
        confinement.shape(command, config, env),
        env,
        run_dir=run_dir,
        workspace=tmp_path / "ws" / "r1",
    )
    assert whole == parts
    assert str(tmp_path / "ws" / "r1") in whole


@dataclass(eq=False)
class Runner:
    agent: str
    shape: RunShape


WIDE = RunShape(endpoints=(Endpoint("x.example", 443),))


def test_parse_sizes() -> None:
    assert parse_sizes('{"default": 1, "reviewer": 0}') == {"default": 1, "reviewer": 0}
    assert parse_sizes({"a": 2}) == {"a": 2}
    for bad in ("[1]", '{"a": -1}', '{"a": "two"}', '{"a": true}', "{"):
        with pytest.raises(PoolSizesError):
            parse_sizes(bad)


def test_nothing_is_started_before_a_run_of_the_agent_taught_its_shape() -> None:
    pool: WarmPool[Runner] = WarmPool(sizes={"default": 2}, max_idle=4)
    assert pool.wanted("a") == 0
    assert pool.learn("a", UNCONFINED) == []
    assert pool.wanted("a") == 2
    pool.starting["a"] += 1
    assert pool.wanted("a") == 1


def test_size_zero_is_off_and_the_idle_cap_bounds_all_agents() -> None:
    pool: WarmPool[Runner] = WarmPool(sizes={"default": 2, "off": 0}, max_idle=3)
    pool.learn("off", UNCONFINED)
    assert pool.wanted("off") == 0
    pool.learn("a", UNCONFINED)
    pool.learn("b", UNCONFINED)
    for _ in range(2):
        pool.add(Runner("a", UNCONFINED))
    assert pool.wanted("a") == 0
    assert pool.wanted("b") == 1  # 3 idle at most, all agents together
    pool.add(Runner("b", UNCONFINED))
    assert pool.wanted("b") == 0
    assert pool.idle_count == 3


def test_at_the_idle_cap_the_agents_dispatched_longest_ago_give_way() -> None:
    now = [0.0]
    pool: WarmPool[Runner] = WarmPool(
        sizes={"default": 1, "big": 2}, max_idle=3, evict_after=30, monotonic=lambda: now[0]
    )
    olds = {}
    for agent in ("a", "b", "c"):
        assert pool.learn(agent, UNCONFINED) == []
        olds[agent] = Runner(agent, UNCONFINED)
        pool.add(olds[agent])
        now[0] += 1
    assert pool.learn("b", UNCONFINED) == []  # b's runner is idle: it needs no room
    # A burst: every agent had a run a moment ago, so none gives way (no runner is discarded
    # that another dispatch just started).
    assert pool.learn("d", UNCONFINED) == []
    assert pool.wanted("d") == 0
    now[0] += 30
    assert pool.learn("d", UNCONFINED) == [olds["a"]]  # a: dispatched longest ago
    assert pool.wanted("d") == 1
    pool.add(Runner("d", UNCONFINED))
    # big wants 2: c (now the oldest idle) and b make room; d, the newest, keeps its runner.
    assert pool.learn("big", UNCONFINED) == [olds["c"], olds["b"]]
    assert pool.wanted("big") == 2
    assert pool.idle_count == 1


def test_a_run_takes_only_a_runner_of_its_agent_and_shape_and_only_once() -> None:
    pool: WarmPool[Runner] = WarmPool(sizes={"default": 2}, max_idle=4)
    pool.learn("a", UNCONFINED)
    narrow, other_agent = Runner("a", UNCONFINED), Runner("b", WIDE)
    pool.add(narrow)
    pool.add(other_agent)
    assert pool.take("a", WIDE) is None  # never a runner of another shape
    assert pool.take("b", UNCONFINED) is None
    assert pool.take("a", UNCONFINED) is narrow
    assert pool.take("a", UNCONFINED) is None  # taken once
    assert not pool.forget(narrow)  # no longer idle: its death is its run's
    assert pool.forget(other_agent)


def test_a_new_shape_makes_the_idle_runners_of_the_old_one_stale() -> None:
    pool: WarmPool[Runner] = WarmPool(sizes={"default": 2}, max_idle=4)
    pool.learn("a", UNCONFINED)
    old = Runner("a", UNCONFINED)
    pool.add(old)
    assert pool.learn("a", WIDE) == [old]
    assert pool.idle_count == 0
    assert pool.templates["a"] == WIDE
    assert pool.wanted("a") == 2


def test_deaths_back_off_and_a_hand_off_resets_the_wait() -> None:
    pool: WarmPool[Runner] = WarmPool(sizes={"default": 1}, max_idle=4)
    assert pool.backoff("a") == 0
    waits = []
    for _ in range(9):
        pool.died("a")
        waits.append(pool.backoff("a"))
    assert waits[:4] == [1, 2, 4, 8]
    assert waits[-1] == BACKOFF_MAX_SECONDS
    assert pool.backoff("b") == 0  # per agent
    pool.learn("a", UNCONFINED)
    pool.add(Runner("a", UNCONFINED))
    assert pool.take("a", UNCONFINED) is not None
    assert pool.backoff("a") == 0


def test_drain_empties_the_pool() -> None:
    pool: WarmPool[Runner] = WarmPool(sizes={"default": 2}, max_idle=4)
    runners = [Runner("a", UNCONFINED), Runner("b", UNCONFINED)]
    for runner in runners:
        pool.add(runner)
    assert pool.drain() == runners
    assert pool.idle_count == 0

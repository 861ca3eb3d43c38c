"""The rollout-tail policy's parts, without Ray: settings, sampler, router, accounting.

The sampler runs on upstream's real ``ReplayBuffer`` code against a scripted world
(``tail_world.TailWorld``) standing in for TransferQueue and the agent loops.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

import verl.trainer.ppo.v1.replay_buffer as upstream_rb
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from recipe.dapo_ascend.rollout_tail.accounting import consumption_metrics
from recipe.dapo_ascend.rollout_tail.balancer import OutstandingTokensBalancer, request_cost
from recipe.dapo_ascend.rollout_tail.policy import TailPolicy
from recipe.dapo_ascend.rollout_tail.sampler import PREFIX, TailCuttingSampler, TailMeter
from tests.recipe.tail_world import TailWorld
from verl_ascend import sections

B = 4  # groups per training batch


# -- settings ---------------------------------------------------------------------------------
def _cfg(**tail):
    return OmegaConf.create({"trainer": {"v1": {"dapo_ascend": {"rollout_tail": tail}}}})


def test_policy_defaults_are_off_and_bad_values_name_the_key():
    assert TailPolicy.from_config(_cfg()).enable is False
    assert TailPolicy.from_config(OmegaConf.create({})).enable is False
    assert TailPolicy.from_config(_cfg(carry_over="yes", max_staleness=3)) == TailPolicy(carry_over=True, max_staleness=3)
    for bad, fragment in (
        ({"over_provision": 0.9}, "rollout_tail.over_provision=0.9: expected a number >= 1.0"),
        ({"over_provision": "lots"}, "rollout_tail.over_provision='lots'"),
        ({"balance": "random"}, "rollout_tail.balance='random': expected one of outstanding_tokens, requests"),
        ({"carry_over": "maybe"}, "rollout_tail.carry_over='maybe' is not a boolean"),
        ({"max_staleness": 0}, "rollout_tail.max_staleness=0: expected an integer >= 1"),
        ({"prefill_weight": -1}, "rollout_tail.prefill_weight=-1: expected a number >= 0"),
        ({"overprovision": 2}, "rollout_tail.overprovision: unknown key; accepted keys: ['enable', 'over_provision'"),
    ):
        with pytest.raises(ValueError) as info:  # SectionError, or the boolean parser's EnvValueError
            TailPolicy.from_config(_cfg(**bad))
        assert fragment in str(info.value)
    # before Ray the values are taken as composed: a YAML bool, as for every declared section
    assert TailPolicy.problems(_cfg(carry_over="yes", keep_surplus=1, max_staleness=0)) == [
        "trainer.v1.dapo_ascend.rollout_tail.carry_over='yes': accepted: true or false",
        "trainer.v1.dapo_ascend.rollout_tail.keep_surplus=1: accepted: true or false",
        "trainer.v1.dapo_ascend.rollout_tail.max_staleness=0: accepted: an integer >= 1 (steps a carried-over "
        "group may wait before it is trained; carry_over=false for none)",
    ]
    assert TailPolicy in sections.declared()  # assembled through the entry-point group


# -- sampler ------------------------------------------------------------------------------------
def _buffer(world: TailWorld, monkeypatch) -> ReplayBuffer:
    monkeypatch.setattr(upstream_rb, "tq", world)
    buffer = ReplayBuffer(
        trainer_mode="sync", trainer_config={}, max_off_policy_threshold=None, max_off_policy_strategy="drop",
        sampler_kwargs={}, poll_interval=0.0, refill_fn=world.submit, filter_groups_metric="acc",
        train_batch_size=B, gen_batch_size=1, max_inflight_gen_batches=1,
    )
    return buffer


def _drive(buffer, world: TailWorld, steps: int, submit_first: bool):
    """Run ``steps`` training steps the way upstream's fit loop does; returns the batches."""
    buffer._wait_for_next_poll = world.advance
    batches = []
    for step in range(1, steps + 1):
        world.step = step
        if submit_first:
            world.submit(B)  # upstream's prepare_step
        batch, metrics = buffer.sample(global_steps=step, partition_id="train", batch_size=B)
        batches.append((batch, metrics))
        world.kv_clear(batch.keys, "train")  # upstream's fit clears the trained keys
    return batches


def test_policy_off_samples_exactly_as_upstream(monkeypatch):
    """Same seeded world: upstream's ReplayBuffer and the (observing) TailMeter give the same
    batches and the same metrics; the meter only adds rollout_tail/* keys."""
    results = []
    for wrap in (False, True):
        world = TailWorld(seed=3)
        buffer = _buffer(world, monkeypatch)
        if wrap:
            buffer = TailMeter.adopt(buffer)
        results.append((_drive(buffer, world, steps=4, submit_first=True), world))
    (plain, world_a), (metered, world_b) = results
    for (batch_a, m_a), (batch_b, m_b) in zip(plain, metered):
        assert batch_a.keys == batch_b.keys and batch_a.tags == batch_b.tags
        assert {k: v for k, v in m_b.items() if not k.startswith(PREFIX)} == m_a
        assert m_b[f"{PREFIX}/aborted_requests"] == 0
    assert world_a.counter == world_b.counter and world_a.tick == world_b.tick
    assert world_a.aborts == world_b.aborts == 0


def _cutter(world, monkeypatch, carry: bool, ratio: float = 2.0, ledger=None, keep_surplus: bool = False):
    world.carry_over = carry
    policy = TailPolicy(enable=True, over_provision=ratio, carry_over=carry, keep_surplus=keep_surplus)
    cutter = TailCuttingSampler.adopt(
        _buffer(world, monkeypatch), policy=policy, refill_granularity=1, abort_fn=world.abort, ledger=ledger
    )

    def refill(count: int) -> int:  # the trainer's submit: dispatch, then tell the sampler
        first = world.counter + 1
        world.submit(count)
        cutter.note_submitted([f"g{i:04d}" for i in range(first, world.counter + 1)])
        return count

    cutter.refill_fn = refill
    return cutter


def _useful(world, uid) -> bool:
    accs = world.groups[uid]["accs"]
    return len(set(accs)) > 1


@pytest.mark.parametrize("carry", [True, False])
def test_cutting_sampler_trains_each_group_once_and_loses_none(monkeypatch, carry):
    world = TailWorld(seed=7, lengths=(1, 1, 2, 2, 3, 12))
    events = []
    cutter = _cutter(world, monkeypatch, carry, ledger=lambda e, s, u: events.append((e, s, list(u))))
    batches = _drive(cutter, world, steps=6, submit_first=False)

    trained: list[str] = []
    for step, (batch, metrics) in enumerate(batches, start=1):
        uids = world.uids_in(batch)
        # Carried groups wait at most max_staleness (1) step; without carry-over none wait.
        assert all(step - world.groups[uid]["step"] <= (1 if carry else 0) for uid in uids)
        assert len(uids) == B and len(batch.keys) == B * world.n  # full groups only
        assert all(_useful(world, uid) for uid in uids)  # dynamic sampling still holds
        assert not any(world.groups[uid]["aborted"] for uid in uids)  # never a cut-off response
        trained += uids
        assert metrics[f"{PREFIX}/submitted_groups"] >= 0
    assert len(trained) == len(set(trained))  # no group trained twice
    assert world.aborts >= 1  # the tail was cut at least once

    fates = {e: set() for e in ("submitted", "filtered", "dropped", "trained")}
    for event, _step, uids in events:
        if event in fates:
            assert not fates[event] & set(uids), f"{event} twice"
            fates[event] |= set(uids)
    assert fates["trained"] == set(trained)
    assert fates["submitted"] == set(world.groups)
    terminal = fates["filtered"] | fates["dropped"] | fates["trained"]
    assert not fates["filtered"] & fates["trained"] and not fates["dropped"] & fates["trained"]
    # Every submitted group is trained, filtered, dropped (no carry-over) or still live: none lost.
    assert fates["submitted"] == terminal | world.live_groups()
    if carry:
        carried = [u for e, _s, uids in events if e == "carried" for u in uids]
        assert carried and set(carried) & set(trained)  # carried groups were trained later
    # Surplus is dropped oldest-last: every group trained at that step is at least as old.
    by_step = {(e, st): set(u) for e, st, u in events}
    for (event, step), uids in by_step.items():
        if event == "dropped" and uids:
            newest_trained = max(world.groups[u]["step"] for u in by_step[("trained", step)])
            assert all(world.groups[u]["step"] >= newest_trained for u in uids)
    else:
        assert fates["dropped"]
        assert all(world.groups[u]["aborted"] or u in fates["dropped"] for u in fates["dropped"])


def test_keep_surplus_trains_complete_surplus_next_step_within_the_staleness_bound(monkeypatch):
    # carry_over off: whatever is carried is complete surplus (aborted groups are discarded).
    world = TailWorld(seed=2, lengths=(1, 1, 1, 2))  # many groups complete at once: surplus
    events = []
    cutter = _cutter(world, monkeypatch, carry=False, keep_surplus=True, ledger=lambda e, s, u: events.append((e, s, u)))
    batches = _drive(cutter, world, steps=5, submit_first=False)
    fate = {(e, s): set(u) for e, s, u in events}
    kept = [(s, u) for (e, s), uids in fate.items() if e == "carried" and s < 5 for u in uids]
    assert kept, "no complete surplus was kept"
    for step, uid in kept:  # trained at the next step, or dropped there as too old
        assert uid in fate[("trained", step + 1)] | fate[("dropped", step + 1)]
    assert any(uid in fate[("trained", step + 1)] for step, uid in kept)
    for step, (batch, _) in enumerate(batches, start=1):
        assert all(step - world.groups[u]["step"] <= 1 for u in world.uids_in(batch))
        assert not any(world.groups[u]["aborted"] for u in world.uids_in(batch))


def test_cutting_sampler_keeps_the_overprovisioned_target(monkeypatch):
    world = TailWorld(seed=1)
    cutter = _cutter(world, monkeypatch, carry=True, ratio=1.5)
    # Before any group is seen, half are expected to survive dynamic sampling (upstream's 2k refill).
    assert cutter.useful_fraction() == 0.5
    assert cutter.groups_to_submit(missing=4, inflight=0) == 12
    assert cutter.groups_to_submit(missing=4, inflight=11) == 1
    assert cutter.groups_to_submit(missing=4, inflight=12) == 0
    assert cutter.groups_to_submit(missing=0, inflight=0) == 0
    cutter.refill_granularity = 4
    assert cutter.groups_to_submit(missing=4, inflight=11) == 4  # whole dataloader fetches
    # It learns the filter rate: all groups useful -> ratio alone; few useful -> many more.
    for _ in range(30):
        cutter._learn_useful_fraction(useful=10, filtered=0)
    assert cutter.useful_fraction() > 0.9 and cutter.inflight_target(4) == 7
    for _ in range(30):
        cutter._learn_useful_fraction(useful=1, filtered=9)
    assert 0.1 <= cutter.useful_fraction() < 0.2 and cutter.inflight_target(4) >= 30
    for _ in range(30):
        cutter._learn_useful_fraction(useful=0, filtered=10)
    assert cutter.useful_fraction() == cutter.MIN_USEFUL_FRACTION  # bounded: at most 10x
    # Without dynamic sampling every complete group is useful.
    cutter.filter_groups_metric = None
    assert cutter.inflight_target(3) == 5


def test_cutting_sampler_learns_the_useful_fraction_while_sampling(monkeypatch):
    world = TailWorld(seed=5, p_acc=0.05)  # ~80% of groups of 4 are all-wrong: filtered
    cutter = _cutter(world, monkeypatch, carry=True, ratio=1.0)
    batches = _drive(cutter, world, steps=4, submit_first=False)
    estimates = [m[f"{PREFIX}/useful_fraction_estimate"] for _, m in batches]
    assert estimates[0] == 0.5 and estimates[-1] < 0.5


def test_without_carry_over_aborted_groups_are_discarded_after_they_settle(monkeypatch):
    world = TailWorld(seed=11, lengths=(1, 30))
    cutter = _cutter(world, monkeypatch, carry=False)
    batches = _drive(cutter, world, steps=3, submit_first=False)
    for batch, metrics in batches:
        assert metrics[f"{PREFIX}/carried_groups"] == 0
    assert any(m[f"{PREFIX}/dropped_groups"] > 0 and m[f"{PREFIX}/aborted_requests"] > 0 for _, m in batches)
    # Nothing aborted is left behind in the store to be sampled later.
    assert not [k for k, v in world.values.items() if v["aborted"]]


# -- router ----------------------------------------------------------------------------------
def test_router_balances_outstanding_tokens_not_request_counts():
    lb = OutstandingTokensBalancer({"a": "A", "b": "B"}, {"default_max_tokens": 1000, "prefill_weight": 0.0})
    assert lb.acquire_server("long", prompt_ids=[1] * 8, sampling_params={})[0] in ("a", "b")
    first = lb.get_status()
    busy = next(s for s, t in first["outstanding_tokens"].items() if t == 1000)
    idle = "b" if busy == "a" else "a"
    # Three short resumed requests all go to the idle replica: by request count the third
    # would go back to the busy one (2 > 1 requests there).
    for i in range(3):
        server, handle = lb.acquire_server(f"short{i}", prompt_ids=[1] * 8, sampling_params={"max_tokens": 50})
        assert server == idle and handle == idle.upper()
    status = lb.get_status()
    assert status["outstanding_tokens"] == {busy: 1000.0, idle: 150.0}
    assert status["servers"] == {busy: 1, idle: 3}
    lb.release_server(busy, request_id="long")
    assert lb.get_status()["outstanding_tokens"][busy] == 0.0
    assert lb.acquire_server("next", prompt_ids=[1], sampling_params={})[0] == busy
    for i in range(3):
        lb.release_server(idle, request_id=f"short{i}")
    assert lb.get_status()["outstanding_tokens"][idle] == 0.0
    assert lb.require_acquire_fields() == ["prompt_ids", "sampling_params"]
    assert lb.require_release_fields() == ["request_id"]


def test_request_cost_counts_budget_and_weighted_prompt():
    assert request_cost([1] * 10, {"max_tokens": 20}, 100, 0.5) == 25.0
    assert request_cost([1] * 10, {"max_new_tokens": 7}, 100, 0.0) == 7.0
    assert request_cost(None, None, 100, 0.1) == 100.0


# -- accounting --------------------------------------------------------------------------------
def test_consumption_metrics_measure_staleness_and_carried_tokens():
    step = 5  # trained with version 4
    fields = [
        {"min_global_steps": 4, "rollout_tail": {"spans": [[0, 6, 4]], "aborts": 0}},
        {"min_global_steps": 3, "rollout_tail": {"spans": [[0, 4, 3], [4, 10, 4]], "aborts": 1}},
        {"min_global_steps": 2, "rollout_tail": {"spans": [[0, 2, 2], [2, 4, 3], [4, 5, 4]], "aborts": 2}},
        {"min_global_steps": 0, "rollout_tail": {"spans": [[0, 100, 0]], "aborts": 0}},  # masked out
    ]
    m = consumption_metrics(fields, [True, True, True, False], step)
    assert m[f"{PREFIX}/carried_tokens"] == 4 + 2 + 2
    assert m[f"{PREFIX}/off_policy_token_fraction"] == pytest.approx(8 / 21)
    assert m[f"{PREFIX}/resumed_responses"] == 2
    assert m[f"{PREFIX}/staleness/mean"] == pytest.approx((0 + 1 + 2) / 3)
    assert m[f"{PREFIX}/staleness/max"] == 2
    on_policy = consumption_metrics([{"min_global_steps": 4}], None, step)
    assert on_policy[f"{PREFIX}/carried_tokens"] == 0 and on_policy[f"{PREFIX}/staleness/max"] == 0


def test_progress_line_shows_the_tail_and_the_cut():
    from verl_ascend.run.progress import format_step

    base = {"critic/score/mean": 0.5, "reward_extra/acc/mean": 0.5, "response_length/mean": 9.0}
    off = format_step({"step": 3, "data": {**base, "rollout_tail/tail_fraction": 0.25, "rollout_tail/aborted_requests": 0}})
    assert "tail 0.25" in off and "cut" not in off
    on = {**base, "rollout_tail/tail_fraction": 0.01, "rollout_tail/aborted_requests": 12, "rollout_tail/carried_tokens": 340}
    assert "cut 12 req, carried 340 tok" in format_step({"step": 4, "data": on})


def test_every_setting_is_in_the_docs():
    """(dapo_base.yaml states each declared default: tests/recipe/test_config_keys.py.)"""
    import dataclasses
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    fields = [f.name for f in dataclasses.fields(TailPolicy)]
    for page in ("rollout_tail.md", "rollout_tail_zh.md"):
        text = (repo / "docs" / "ascend_tutorial" / page).read_text()
        assert all(f"`{name}`" in text for name in fields), page


def test_router_is_installed_through_upstreams_router_config_path(tmp_path, monkeypatch):
    from verl.workers.rollout.router import _load_router_yaml, _resolve_router_class

    from verl_ascend.run.files import ENV_RUN_DIR
    from recipe.dapo_ascend.rollout_tail.component import write_router_yaml

    monkeypatch.setenv(ENV_RUN_DIR, str(tmp_path))
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"response_length": 96, "router_config_path": None}}})
    path = write_router_yaml(cfg, TailPolicy(enable=True, prefill_weight=0.2))
    assert path == str(tmp_path / "router.yaml") == cfg.actor_rollout_ref.rollout.router_config_path
    loaded = _load_router_yaml(path)  # what upstream's LLMServerManager does with it
    assert _resolve_router_class(loaded["router_class"]) is OutstandingTokensBalancer
    assert loaded["default_max_tokens"] == 96 and loaded["prefill_weight"] == 0.2
    # A router of the user's own, or balance=requests, is left alone.
    assert write_router_yaml(cfg, TailPolicy(enable=True)) is None
    plain = OmegaConf.create({"actor_rollout_ref": {"rollout": {"response_length": 96, "router_config_path": None}}})
    assert write_router_yaml(plain, TailPolicy(enable=True, balance="requests")) is None
    assert plain.actor_rollout_ref.rollout.router_config_path is None



def test_tail_workload_has_a_long_tail_in_its_data(tmp_path):
    """``--workload tail``: one prompt in eight is hard and runs to the length limit, unanswered.

    The distribution is what the benchmark's speedup is made of: a step that waits for every
    response waits for the hard groups' long ones while the rest of the server idles. It must
    live in the data, so that it stays put while the model learns: the hard responses carry no
    answer (reward 0 for the whole group, which dynamic sampling filters out, so they are never
    trained) and the easy prompts' answers are one digit and EOS, by a wide margin.
    """
    import pandas as pd

    from recipe.dapo_ascend.tiny.assets import HARD_MARK, LONG_TAIL, VOCAB, build
    from recipe.dapo_ascend.tiny.task import compute_score
    from verl.cpu.rollout.engine import GenerationRequest, HFGenerationEngine, SamplingSpec
    from verl.cpu.rollout.server import load_causal_lm

    root = build(tmp_path / "tail", workload="tail", train_rows=2048, val_rows=4)
    rows = pd.read_parquet(root / "data" / "train.parquet")
    contents = [m[0]["content"] for m in rows["prompt"]]
    hard_share = sum(c.endswith(HARD_MARK) for c in contents) / len(contents)
    assert abs(hard_share - LONG_TAIL["hard_fraction"]) < 0.02, hard_share
    # The rendered prompt ends in "?" for a hard prompt and in "=" otherwise (the chat template).
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(root / "model")
    rendered = {c: tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True,
                                           tokenize=False)
                for c in [c for c in contents if c.endswith("?")][:20] + [c for c in contents if not c.endswith("?")][:20]}
    assert all(r.endswith("?") == c.endswith("?") and r.endswith("=") != c.endswith("?") for c, r in rendered.items())

    eng = HFGenerationEngine(load_causal_lm(str(root / "model")), eos_token_ids=[1], pad_token_id=0)
    digits = [VOCAB.index(str(d)) for d in range(10)]
    eq, mark = VOCAB.index("="), VOCAB.index(HARD_MARK)
    easy = [[digits[i % 10], digits[(3 * i) % 10], digits[(7 * i) % 10], eq] for i in range(96)]
    hard = [[digits[i % 10], digits[(3 * i) % 10], mark] for i in range(24)]
    results = eng.generate(
        [GenerationRequest(str(i), p, SamplingSpec(max_new_tokens=448, seed=i)) for i, p in enumerate(easy + hard)]
    )
    easy_lengths = sorted(len(r.token_ids) for r in results[:96])
    hard_results = results[96:]
    # Easy: one digit and EOS (a second digit 1 time in 1000).
    assert easy_lengths.count(2) >= 94 and easy_lengths[-1] <= 4, easy_lengths
    # Hard: "?" then EOS or the limit; a geometric run at 1/500 per token reaches 448 ~40% of the time.
    capped = sum(len(r.token_ids) == 448 for r in hard_results)
    assert 4 <= capped <= 18, [len(r.token_ids) for r in hard_results]
    for r in hard_results:
        assert set(r.token_ids) <= {mark, 1}, r.token_ids
        text = tok.decode(r.token_ids, skip_special_tokens=True)
        assert compute_score("verl_ascend/first_digit", text, "7")["score"] == 0.0


def test_tail_workload_rejects_an_unknown_long_tail_key(tmp_path):
    from recipe.dapo_ascend.tiny.assets import build

    with pytest.raises(ValueError, match=r"stop_after_digt.*accepted: hard_fraction, stop_after_digit, stop_in_long"):
        build(tmp_path / "tail", workload="tail", long_tail={"stop_after_digt": 0.1})
    assert not (tmp_path / "tail").exists() and list(tmp_path.iterdir()) == []

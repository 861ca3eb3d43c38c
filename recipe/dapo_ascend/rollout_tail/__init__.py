"""Cutting the rollout long tail of synchronous DAPO (``trainer.v1.dapo_ascend.rollout_tail``).

In a synchronous step every card waits for the longest response of the step. DAPO already
generates more than it trains on (dynamic sampling drops groups whose rewards are all equal),
so the policy here generates on purpose more than it needs and stops early:

1. ``over_provision``: keep ``ceil(ratio * groups still needed / expected useful fraction)``
   prompt groups in flight (``sampler.TailCuttingSampler``), topped up as groups finish or are
   filtered out; the useful fraction (groups dynamic sampling keeps) is learnt as the run goes;
2. as soon as ``train_batch_size`` groups that survive the dynamic-sampling filter are complete,
   abort every request still running, through the servers' ``abort_all_requests`` (the same
   call upstream's vLLM server and verl.cpu's HF server answer);
3. ``carry_over``: an aborted response is re-submitted from exactly its tokens
   (``client.TailAwareClient``: prompt + tokens so far, remaining budget) and continues with the
   next step's weights; the span of tokens each weight version produced is recorded, so
   staleness and off-policy tokens are measured, and upstream's ``rollout_corr/*`` metrics
   (and, when enabled, ``algorithm.rollout_correction``) see the off-policy part;
   ``max_staleness`` bounds how long a group may be carried. Without carry-over, aborted groups
   are discarded (strictly on-policy). Complete surplus groups are discarded (as upstream does)
   unless ``keep_surplus``, which trains them next step instead;
4. ``balance: outstanding_tokens``: requests go to the replica with the fewest outstanding
   tokens, not the fewest requests (``balancer.OutstandingTokensBalancer``, installed through
   upstream's ``rollout.router_config_path``);
5. per step it logs ``rollout_tail/*``: tail fraction, aborted requests, dropped and carried
   tokens, staleness (``accounting``). The tail fraction is measured the same way with the
   policy off (observation only, upstream's sampling unchanged), so the two can be compared.

The trainer side is ``component.RolloutTail``, a component of ``recipe.dapo_ascend.trainer``.
"""

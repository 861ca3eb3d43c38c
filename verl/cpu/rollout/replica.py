"""``HFReplica``: upstream's ``RolloutReplica`` for the ``hf`` rollout backend.

One replica = one training rank (the HF server does no tensor parallelism), so a run on
``n`` ranks has ``n`` replicas, each a named Ray actor ``hf_server_<replica>_0`` that the
worker-side adapter finds by name to push weights.
"""

from __future__ import annotations

import ray

from verl.workers.rollout.replica import RolloutReplica


def server_actor_name(replica_rank: int, node_rank: int = 0, prefix: str = "hf_") -> str:
    return f"{prefix}server_{replica_rank}_{node_rank}"


class HFReplica(RolloutReplica):
    """The replica of ``actor_rollout_ref.rollout.name=hf``: launches the CPU backend's HF rollout server and
    fills in the private handle and address upstream's ``server_handle``/``server_address`` return (seam
    ``cpu_hf_replica``; goes when upstream's ``RolloutReplica`` lets a subclass return them from a launch
    hook)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.world_size != 1:
            raise ValueError(
                "rollout.name=hf serves each replica from one process: "
                "actor_rollout_ref.rollout.tensor_model_parallel_size, data_parallel_size and "
                f"pipeline_model_parallel_size must all be 1 (got a replica world size of {self.world_size})"
            )

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self):
        from verl.cpu.rollout.server import HFRolloutServer

        if self.is_reward_model:
            name = f"hf_server_reward_{self.replica_rank}_0{self.name_suffix}"
        elif self.is_teacher_model:
            name = f"hf_server_teacher_{self.replica_rank}_0{self.name_suffix}"
        else:
            name = server_actor_name(self.replica_rank) + self.name_suffix

        options = {"name": name, "max_concurrency": self.max_concurrency, "num_cpus": 0}
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False
            )
        server = (
            ray.remote(HFRolloutServer)
            .options(**options)
            .remote(
                config=self.config,
                model_config=self.model_config,
                replica_rank=self.replica_rank,
            )
        )
        self.servers = [server]
        address, _ = await server.get_server_address.remote()
        self._server_handle = server
        self._server_address = address


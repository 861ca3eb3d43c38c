"""The cluster check's comparison, probes and table on real files and sockets, without Ray (fast tests).

The e2e tests (``test_cluster_e2e.py``) run the same code on the two-node loopback cluster with one injected
fault at a time; these pin each rule's verdict and the node it names.
"""

from __future__ import annotations

import json
import socket

import pytest

from verl_ascend.cluster import cells, collective, compare, probe
from verl_ascend.cluster.job import Job, host_bytes, shared, watched
from verl_ascend.cluster.table import Report, text, to_json

HEAD, WORKER, THIRD = "n-head", "n-worker", "n-third"
LABELS = {HEAD: "10.0.0.1 (head)", WORKER: "10.0.0.2", THIRD: "10.0.0.3"}


def job(tmp_path=None, **kw) -> Job:
    base = dict(device="cpu", nnodes=2, gpus_per_node=8, runtime_env={"env_vars": {"VERL_USE_EXTERNAL_MODULES": "m"}},
                driver_env={"HCCL_CONNECT_TIMEOUT": "600"}, model_paths=(), data_files=(),
                checkpoint_dir=str(tmp_path / "ckpt") if tmp_path else "/nonexistent", checkpoint_bytes=None,
                host_bytes=None)
    base.update(kw)
    return Job(**base)


# ----------------------------------------------------------------------------- stack
def test_a_shadowed_package_fails_naming_version_folder_and_the_pip_fix():
    driver = {"python": "3.11.9", "transformers": "4.57.1 (/venv/site-packages)", "torch": "2.13.0 (/venv/site-packages)"}
    node = {**driver, "transformers": "4.99.0 (/tmp/shadow)"}
    cell = compare.stack_cell(driver, node)
    assert cell.status == cells.FAIL
    assert cell.detail == "transformers 4.99.0 (/tmp/shadow)"
    assert "transformers 4.57.1 (/venv/site-packages)" in cell.expected
    assert "pip install transformers==4.57.1" in cell.fix and "PYTHONPATH" in cell.fix


def test_same_versions_from_another_folder_are_the_same_stack():
    driver = {"torch": "2.13.0 (/venv/a)"}
    assert compare.stack_cell(driver, {"torch": "2.13.0 (/venv/b)"}).status == cells.OK
    missing = compare.stack_cell(driver, {})
    assert missing.status == cells.FAIL and "torch <unset>" in missing.detail


def test_stack_versions_reads_this_process_metadata():
    versions = probe.stack_versions()
    assert versions["verl"].startswith("0.9.1 (") and "verl-ascend" in versions
    assert versions["python"].count(".") == 2


# ----------------------------------------------------------------------------- environment
def test_env_rules_exported_driver_and_majority():
    j = job()
    ok = {"VERL_USE_EXTERNAL_MODULES": "m", "HCCL_CONNECT_TIMEOUT": "600"}
    assert compare.env_cell(j, ok, {}, "head").status == cells.OK
    lost = compare.env_cell(j, {"VERL_USE_EXTERNAL_MODULES": "m"}, {}, "head")
    assert lost.status == cells.FAIL and lost.detail == "HCCL_CONNECT_TIMEOUT=<unset>"
    assert "set in the driver's shell, not exported" in lost.expected and "ray start" in lost.fix
    wrong_export = compare.env_cell(j, {**ok, "VERL_USE_EXTERNAL_MODULES": "x"}, {}, "head")
    assert "exported by the job's runtime_env" in wrong_export.expected
    odd = compare.env_cell(j, {**ok, "HCCL_BUFFSIZE": "400"}, {"HCCL_BUFFSIZE": None}, "10.0.0.1 (head)")
    assert odd.status == cells.FAIL and odd.expected == "HCCL_BUFFSIZE=<unset> (as on 10.0.0.1 (head))"


def test_env_majority_prefers_the_head_then_the_most_common_value():
    views = {HEAD: {"HCCL_X": "1"}, WORKER: {"HCCL_X": "2"}, THIRD: {"HCCL_X": "2"}}
    assert compare.env_majority(views, HEAD) == {"HCCL_X": "1"}
    assert compare.env_majority(views, None) == {"HCCL_X": "2"}
    assert compare.env_majority({HEAD: {}, WORKER: {"GLOO_SOCKET_IFNAME": "eth0"}}, HEAD) == {"GLOO_SOCKET_IFNAME": None}


def test_watched_and_shared_names():
    assert shared("HCCL_CONNECT_TIMEOUT") and shared("GLOO_SOCKET_IFNAME") and shared("VLLM_USE_V1")
    assert not shared("VERL_ASCEND_DOCTOR") and watched("VERL_ASCEND_DOCTOR")
    assert not watched("ASCEND_RT_VISIBLE_DEVICES") and not watched("PATH")


def test_watched_env_collects_driver_exported_and_own_names():
    j = job(driver_env={"HCCL_A": "1"}, runtime_env={"env_vars": {"VERL_B": "2"}})
    env = probe.watched_env(j, {"HCCL_A": "1", "VERL_B": "2", "NCCL_C": "3", "HOME": "/root"})
    assert env == {"HCCL_A": "1", "NCCL_C": "3", "VERL_B": "2"}


# ----------------------------------------------------------------------------- files
def test_model_and_data_fingerprints_on_real_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"a": 1}')
    (model / "tokenizer.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    (model / "README.md").write_text("ignored")
    print_ = probe.model_fingerprint(str(model))
    assert set(print_) == {"config.json", "tokenizer.json", "model.safetensors"}
    assert print_["model.safetensors"] == "1000 B"
    assert probe.model_fingerprint(str(tmp_path / "absent")) == {"": "missing"}
    data = tmp_path / "train.parquet"
    data.write_bytes(b"x" * 10)
    assert probe.data_fingerprint(str(data)).startswith("10 B, ")
    assert probe.data_fingerprint(str(tmp_path / "none.parquet")) == "missing"
    assert probe.data_fingerprint(str(tmp_path)) == "a folder, not a file"


def test_files_cell_names_a_missing_folder_and_a_changed_config(tmp_path):
    reference = {"model /m": {"config.json": "aa", "model.safetensors": "10 B"}, "data /d": {"": "10 B, ff"}}
    missing = compare.files_cell(reference, {"model /m": {"": "missing"}, "data /d": {"": "10 B, ff"}})
    assert missing.status == cells.FAIL and missing.detail == "model /m missing"
    changed = compare.files_cell(reference, {"model /m": {"config.json": "bb", "model.safetensors": "10 B"},
                                             "data /d": {"": "10 B, ff"}})
    assert changed.detail == "model /m/config.json bb" and "model /m/config.json aa" in changed.expected
    assert compare.files_cell(reference, reference).status == cells.OK


# ----------------------------------------------------------------------------- checkpoint folder
def test_tokens_in_a_real_folder_shared_then_node_local(tmp_path):
    j = job(tmp_path, checkpoint_bytes=10, checkpoint_dir=str(tmp_path / "ckpt" / "run"))
    writes = {n: probe.write_token(j, n) for n in (HEAD, WORKER)}
    assert all(w["wrote"] for w in writes.values()) and writes[HEAD]["created"] and not writes[WORKER]["created"]
    seen = {n: probe.read_tokens(j) for n in (HEAD, WORKER)}
    made = compare.checkpoint_cells(j, writes, seen, LABELS, HEAD)
    assert {c.status for c in made.values()} == {cells.OK} and "shared" in made[WORKER].detail
    # the worker's own disk: it sees only its own token, the head only its own
    local = compare.checkpoint_cells(j, writes, {HEAD: [HEAD], WORKER: [WORKER]}, LABELS, HEAD)
    assert local[HEAD].status == cells.OK  # the driver's storage is the job's: only the other node is named
    assert local[WORKER].status == cells.FAIL and "node-local" in local[WORKER].detail
    assert "10.0.0.1 (head)" in local[WORKER].detail and "resume" in local[WORKER].detail
    for node in (HEAD, WORKER):  # the creator first: its folder still holds the worker's token
        probe.remove_token(j, node)
    for node in (HEAD, WORKER):
        probe.remove_created(j, writes[node]["created"])
    assert list(tmp_path.iterdir()) == []  # ckpt/run created by the check, both removed by it once empty


def test_checkpoint_room_and_unwritable_folder(tmp_path):
    j = job(tmp_path, checkpoint_bytes=1 << 60)
    record = probe.write_token(j, HEAD)
    short = compare.checkpoint_cells(j, {HEAD: record}, {HEAD: [HEAD]}, LABELS, HEAD)[HEAD]
    assert short.status == cells.FAIL and "below" in short.detail and short.data["needed"] == 1 << 60
    blocked = tmp_path / "file"
    blocked.write_text("")
    bad = job(checkpoint_dir=str(blocked / "ckpt"))
    record = probe.write_token(bad, HEAD)
    assert record["wrote"] is False
    cell = compare.checkpoint_cells(bad, {HEAD: record}, {HEAD: []}, LABELS, HEAD)[HEAD]
    assert cell.status == cells.FAIL and "cannot write" in cell.detail


# ----------------------------------------------------------------------------- interfaces and ports
FOUND = {"lo": ["127.0.0.1", "::1"], "eth0": ["192.0.2.2"], "eth1": [], "ib0": ["10.1.0.2"]}


@pytest.mark.parametrize("variable,value,picked,missing", [
    ("GLOO_SOCKET_IFNAME", "eth0", ["eth0"], []),
    ("GLOO_SOCKET_IFNAME", "eth", [], ["eth"]),  # gloo: exact names only
    ("GLOO_SOCKET_IFNAME", "eth0,ens9", ["eth0"], ["ens9"]),
    ("HCCL_SOCKET_IFNAME", "eth", ["eth0", "eth1"], []),  # HCCL/NCCL: a prefix
    ("HCCL_SOCKET_IFNAME", "=eth", [], ["=eth"]),  # = asks for the exact name
    ("NCCL_SOCKET_IFNAME", "^lo,eth1", ["eth0", "ib0"], []),  # ^: an exclusion list
])
def test_interface_selection(variable, value, picked, missing):
    assert probe.match_interfaces(variable, value, FOUND) == (picked, missing)


def test_socket_cells():
    [bad] = probe.socket_cells({"GLOO_SOCKET_IFNAME": "ens9"}, 2, FOUND)
    assert bad.status == cells.FAIL and "no interface ens9" in bad.detail and "eth0 192.0.2.2" in bad.expected
    [bare] = probe.socket_cells({"GLOO_SOCKET_IFNAME": "eth1"}, 2, FOUND)
    assert bare.status == cells.FAIL and "no address" in bare.detail
    [good] = probe.socket_cells({"GLOO_SOCKET_IFNAME": "lo"}, 2, FOUND)
    assert good.status == cells.OK
    [unset] = probe.socket_cells({}, 2, FOUND)
    assert unset.status == cells.WARN and "verl #967" in unset.detail
    assert probe.socket_cells({}, 1, FOUND) == []  # one node: nothing crosses a network
    assert "lo" in probe.interfaces()  # this machine's own, read by ioctl


def test_port_ranges_parse_and_refuse():
    env = {"HCCL_IF_BASE_PORT": "60000", "HCCL_HOST_SOCKET_PORT_RANGE": "61000-61010,61020"}
    assert probe.port_ranges(env) == [("HCCL_IF_BASE_PORT", 60000, 60015), ("HCCL_HOST_SOCKET_PORT_RANGE", 61000, 61010),
                                      ("HCCL_HOST_SOCKET_PORT_RANGE", 61020, 61020)]
    assert probe.port_ranges({"HCCL_HOST_SOCKET_PORT_RANGE": "auto"}) == []
    for bad in ({"HCCL_IF_BASE_PORT": "x"}, {"HCCL_IF_BASE_PORT": "65530"}, {"HCCL_HOST_SOCKET_PORT_RANGE": "9-3"}):
        with pytest.raises(ValueError, match="HCCL_"):
            probe.port_ranges(bad)


def test_a_listener_in_the_range_is_named():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        base = port - 3
        [cell] = probe.port_cells({"HCCL_IF_BASE_PORT": str(base)}, "127.0.0.1")
        assert cell.status == cells.FAIL and f"in use {port}" in cell.detail and f"sport = :{port}" in cell.fix
    [free] = probe.port_cells({"HCCL_IF_BASE_PORT": str(base)}, "127.0.0.1")
    assert free.status == cells.OK
    [bad] = probe.port_cells({"HCCL_IF_BASE_PORT": "0"}, "127.0.0.1")
    assert bad.status == cells.FAIL


# ----------------------------------------------------------------------------- memory, devices
def test_memory_cell_against_the_offload_estimate():
    assert probe.memory_cell(job()).status == cells.OK
    need = probe.memory_cell(job(host_bytes=1 << 60, host_bytes_why="x"))
    assert need.status == cells.FAIL and need.data["needed"] == 1 << 60


def test_host_bytes_counts_offloaded_states_per_node():
    from omegaconf import OmegaConf

    config = OmegaConf.create({"actor_rollout_ref": {"actor": {"fsdp_config": {"param_offload": True,
                                                                               "optimizer_offload": True}}}})
    need, why = host_bytes(config, 32_000_000_000, 16)
    assert need == 32_000_000_000 * 12 // 16 and "16 nodes" in why
    config.actor_rollout_ref.actor.fsdp_config.param_offload = False
    assert host_bytes(config, 1000, 1)[0] == 8000
    config.actor_rollout_ref.actor.fsdp_config.optimizer_offload = False
    assert host_bytes(config, 1000, 1) == (None, "")


def test_device_slots():
    assert compare.device_slots(job(), "NPU", 8).status == cells.OK
    short = compare.device_slots(job(), "NPU", 4)
    assert short.status == cells.FAIL and "at least 8 NPU" in short.expected


def test_same_cell_names_the_reference():
    cell = compare.same_cell("stack", "stack facts", {"CANN": "9.1.0"}, {"CANN": "8.3.RC1"}, "10.0.0.1 (head)")
    assert cell.status == cells.FAIL and cell.detail == "stack facts: CANN 8.3.RC1"
    assert cell.expected == "CANN 9.1.0 (as on 10.0.0.1 (head))"


# ----------------------------------------------------------------------------- collective
def test_bus_bandwidth_arithmetic():
    assert collective.bus_bandwidth(1_000_000, 0.001, 2) == pytest.approx(1e9)  # 2(n-1)/n = 1
    assert collective.bus_bandwidth(1_000_000, 0.001, 16) == pytest.approx(1.875e9)
    assert collective.bus_bandwidth(1, 0.0, 2) == 0.0


def test_collective_cells_name_the_node_that_never_joined():
    ranks = {HEAD: 0, WORKER: 1, THIRD: 2}
    results = {HEAD: {"rank": 0, "ok": False, "stage": "group", "error": "timeout", "missing": [2]},
               WORKER: {"rank": 1, "ok": False, "stage": "group", "error": "timeout"},
               THIRD: None}
    made = collective.collective_cells(results, LABELS, ranks, "gloo", 5)
    assert "no answer within 5 s" in made[THIRD].detail
    results[THIRD] = {"rank": 2, "ok": False, "stage": "rendezvous", "error": "refused"}
    made = collective.collective_cells(results, LABELS, ranks, "gloo", 5)
    assert "never reached rank 0's store at 10.0.0.1 (head)" in made[THIRD].detail
    assert made[WORKER].status == made[HEAD].status == cells.SKIP  # they only waited for the third node
    assert "waited for 10.0.0.3" in made[WORKER].detail


def test_one_rank_all_reduce_runs_for_real():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = collective.run_rank(0, 1, "127.0.0.1", port, "gloo", "cpu", 20, 1 << 16)
    assert result["ok"] and result["bytes"] == 1 << 16 and result["seconds"] > 0
    [cell] = collective.collective_cells({HEAD: result}, LABELS, {HEAD: 0}, "gloo", 20).values()
    assert cell.status == cells.OK and cell.data["bytes"] == 1 << 16


# ----------------------------------------------------------------------------- table
def test_table_text_json_and_verdict():
    made = [cells.ok("stack", "same").at(LABELS[HEAD]), cells.fail("env", "X=<unset>", "X=1", "export X").at(LABELS[WORKER]),
            cells.skip("links", "no hccn_tool").at(LABELS[HEAD]), cells.warn("socket", "unset", "set", "set it").at(LABELS[HEAD])]
    report = Report("title", [LABELS[HEAD], LABELS[WORKER]], made, ["note"], wall_s=1.5)
    assert not report.ready and report.status(LABELS[WORKER], "env") == "FAIL" and report.status(LABELS[WORKER], "stack") == "-"
    rendered = text(report)
    assert "FAIL 10.0.0.2  env: X=<unset>" in rendered and "fix: export X" in rendered
    assert "links skipped: no hccn_tool" in rendered and rendered.endswith("1 warnings (1.5 s)")
    assert rendered.index("FAIL 10.0.0.2") < rendered.index("warn 10.0.0.1")  # failures first
    data = json.loads(to_json(report))
    assert data["ready"] is False and data["table"]["10.0.0.2"]["env"] == "FAIL"
    assert [f["check"] for f in data["findings"]] == ["env", "socket"]
    assert Report("t", [LABELS[HEAD]], [made[0]]).ready


def test_a_cell_outside_the_columns_is_refused():
    with pytest.raises(ValueError, match="accepted: node, stack"):
        cells.Cell("weather", cells.OK, "sunny")


def test_the_ranks_that_only_waited_are_not_named():
    ranks = {HEAD: 0, WORKER: 1}
    results = {HEAD: {"rank": 0, "ok": False, "stage": "group", "error": "DistStoreError: wait timed out", "missing": []},
               WORKER: {"rank": 1, "ok": False, "stage": "group", "error": "RuntimeError: Unable to find address for: ens9"}}
    made = collective.collective_cells(results, LABELS, ranks, "gloo", 5)
    assert made[WORKER].status == cells.FAIL and "ens9" in made[WORKER].detail
    assert made[HEAD].status == cells.SKIP and "waited for 10.0.0.2" in made[HEAD].detail

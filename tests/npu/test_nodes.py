"""The Ascend backend's node probes for ``verl-ascend cluster``: parsers on recorded tool outputs, then the
probes running the tools as subprocesses (stand-in ``npu-smi`` / ``hccn_tool`` scripts printing those records).

The records in ``fixtures/nodes/`` were written from the tools' documented output formats (npu-smi info's
summary and process tables, hccn_tool's ``-link -g`` / ``-tls -g`` / ``-ip -g``); a real Ascend host's
output replaces them when one is at hand.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path

import pytest

from verl.ascend.nodes import probe as node_probe
from verl.ascend.nodes import tools
from verl_ascend.cluster import cells
from verl_ascend.cluster.job import Job

RECORDS = Path(__file__).parent / "fixtures" / "nodes"


def read(name: str) -> str:
    return (RECORDS / name).read_text()


def test_npu_smi_910b3_cards_health_and_driver_version():
    version, cards = tools.parse_npu_smi(read("npu_smi_info_910b3.txt"))
    assert version == "23.0.6"
    assert [c.npu for c in cards] == list(range(8))  # the process table's "0  0 | 412345" row is not a card
    assert {c.name for c in cards} == {"910B3"} and {c.health for c in cards} == {"OK"}
    assert cards[0].bus_ids == ("0000:C1:00.0",) and cards[7].bus_ids == ("0000:02:00.0",)
    _, sick = tools.parse_npu_smi(read("npu_smi_info_910b3_alarm.txt"))
    assert [(c.npu, c.health) for c in sick if c.health != "OK"] == [(5, "Alarm")]


def test_npu_smi_a3_two_chips_per_card():
    version, cards = tools.parse_npu_smi(read("npu_smi_info_a3.txt"))
    assert version == "24.1.rc2"
    assert [(c.npu, c.name, len(c.bus_ids)) for c in cards] == [(0, "Ascend910", 2), (1, "Ascend910", 2)]


def test_hccn_tool_records():
    assert tools.parse_link(read("hccn_link_up.txt")) == "UP"
    assert tools.parse_link(read("hccn_link_down.txt")) == "DOWN"
    assert tools.parse_link("hccn_tool: device 9 not found") is None
    assert tools.parse_tls(read("hccn_tls_off.txt")) == "0" and tools.parse_tls(read("hccn_tls_on.txt")) == "1"
    assert tools.parse_ip(read("hccn_ip.txt")) == ipaddress.IPv4Interface("29.21.0.11/24")
    assert tools.parse_ip("ipaddr:1.2.3.4") is None


@pytest.mark.parametrize("value,visible,problem", [
    (None, None, None),  # unset: every card, ids the same both ways
    ("0,1,2,3", [0, 1, 2, 3], None),
    ("4,5,6,7", [4, 5, 6, 7], "0->4, 1->5, 2->6, 3->7"),  # verl PR #7507: set_device(5) under 4,5,6,7
    ("0,2,3", [0, 2, 3], "1->2"),  # a hole: not contiguous
])
def test_noset_mapping(value, visible, problem):
    assert tools.parse_visible(value) == visible
    found = tools.noset_mapping_problem(visible)
    assert (found is None) if problem is None else (problem in found)


def test_a_malformed_visible_list_is_named():
    with pytest.raises(ValueError, match="ASCEND_RT_VISIBLE_DEVICES='0,a'"):
        tools.parse_visible("0,a")


def test_links_judged_from_parsed_records():
    ip, other = tools.parse_ip(read("hccn_ip.txt")), tools.parse_ip(read("hccn_ip_other_subnet.txt"))
    made, same = node_probe.judge_links({0: "UP", 1: "UP"}, {0: "0", 1: "0"}, {0: ip, 1: ip})
    assert [c.status for c in made] == [cells.OK] and same == {"TLS switch": "0", "netmask": "255.255.255.0"}
    made, _ = node_probe.judge_links({0: "UP", 1: "DOWN"}, {0: "0", 1: "1"}, {0: ip, 1: other})
    details = " | ".join(c.detail for c in made)
    assert [c.status for c in made] == [cells.FAIL] * 3
    assert "cards [1]" in details and "TLS switch differs" in details and "not in one subnet" in details


def job(gpus: int = 8) -> Job:
    return Job("npu", 2, gpus, {}, {}, (), (), "/tmp/ckpt", None, None)


@pytest.fixture
def tools_on_path(tmp_path, monkeypatch):
    """Stand-in npu-smi and hccn_tool on PATH that print the recorded outputs (card 1's link DOWN when asked)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "npu-smi": f'#!/bin/sh\ncat "{RECORDS}/${{NPU_SMI_RECORD:-npu_smi_info_910b3.txt}}"\n',
        "hccn_tool": (f'#!/bin/sh\ncase "$3" in\n  -link) [ "$2" = "${{LINK_DOWN:-none}}" ] && cat "{RECORDS}/hccn_link_down.txt" '
                      f'|| cat "{RECORDS}/hccn_link_up.txt" ;;\n  -tls) cat "{RECORDS}/hccn_tls_off.txt" ;;\n'
                      f'  -ip) cat "{RECORDS}/hccn_ip.txt" ;;\nesac\n'),
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_devices_through_the_tool(tools_on_path):
    made, same = node_probe.device_cells(job(), {}, 8.0)
    assert [c.status for c in made] == [cells.OK] and "8 cards, 8 visible" in made[0].detail
    assert same == {"npu-smi version": "23.0.6", "card model": "910B3"}
    noset = {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7", node_probe.NOSET: "1"}
    made, _ = node_probe.device_cells(job(4), noset, 4.0)
    assert [c.status for c in made] == [cells.FAIL] and "logical->physical 0->4, 1->5" in made[0].detail
    made, _ = node_probe.device_cells(job(8), {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, 4.0)
    assert "4 visible cards, Ray NPU slots 4.0, n_gpus_per_node=8" in made[0].detail
    made, _ = node_probe.device_cells(job(), {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,9"}, 8.0)
    assert "cards [9] npu-smi does not list" in made[0].detail


def test_unhealthy_card_and_link_down_through_the_tools(tools_on_path, monkeypatch):
    monkeypatch.setenv("NPU_SMI_RECORD", "npu_smi_info_910b3_alarm.txt")
    made, _ = node_probe.device_cells(job(), {}, 8.0)
    assert made[0].status == cells.FAIL and made[0].detail == "cards not healthy: 5 Alarm"
    monkeypatch.setenv("LINK_DOWN", "3")
    made, same = node_probe.link_cells({"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"})
    assert [c.status for c in made] == [cells.FAIL] and "cards [3]" in made[0].detail
    assert same["TLS switch"] == "0"


def test_without_the_tools_the_probes_say_what_they_would_check(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(node_probe, "TOOL_HOMES", {})
    [devices], _ = node_probe.device_cells(job(), {}, None)
    [links], _ = node_probe.link_cells({})
    assert devices.status == links.status == cells.SKIP
    assert "would check the card count and health" in devices.detail and "-tls -g" in links.detail


def test_the_platform_hook_answers_with_all_three_columns(monkeypatch, tmp_path):
    from verl_ascend.device import device_hooks

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(node_probe, "TOOL_HOMES", {})
    hooks = device_hooks("npu")
    answer = hooks.cluster_probe(job())
    assert {c.check for c in answer["cells"]} == {"stack", "devices", "links"}
    assert "CANN" in answer["same"]["stack"]
    assert hooks.cluster_resource() == "NPU"
    assert hooks.cluster_collective() in (("gloo", "cpu"), ("hccl", "npu"))  # the emulator's, or a real NPU's

"""Readers of the Ascend node tools' text output: ``npu-smi info`` and ``hccn_tool``'s link, TLS and IP queries.

Why parsers of text: neither tool has a machine-readable mode on the driver releases of Atlas 800T A2 /
A3 hosts, and ``verl-ascend cluster`` must read them on every node. Each reader takes the tool's stdout
and returns plain values; the formats follow the tools' documentation (Ascend's npu-smi and hccn_tool
command references) and are tested on recorded outputs (``tests/npu/fixtures/nodes/``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

BUS_ID = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
SMI_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")


@dataclass(frozen=True)
class Card:
    npu: int  # the NPU id npu-smi shows (the physical id ASCEND_RT_VISIBLE_DEVICES names)
    name: str  # chip name, e.g. 910B3
    health: str  # OK, Warning, Alarm, Critical, ...
    bus_ids: tuple[str, ...] = ()  # one per chip (two on an A3 card)


def parse_npu_smi(text: str) -> tuple[str | None, list[Card]]:
    """(driver version, cards) of ``npu-smi info``'s summary table; the process table after it is ignored.

    A card is two table rows: ``| NPU  Name | Health | ...`` then one ``| Chip | Bus-Id | ...`` row per chip."""
    version = None
    cards: list[Card] = []
    for line in text.splitlines():
        match = SMI_VERSION.search(line)
        if match:
            version = match.group(2)
            continue
        if "Process id" in line or "Process name" in line:
            break  # the process table: its rows look like chip rows
        fields = [f.strip() for f in line.strip().strip("|").split("|")]
        if len(fields) < 2 or not fields[0] or not fields[0].split()[0].isdigit():
            continue
        head = fields[0].split()
        if BUS_ID.match(fields[1]):
            if cards:
                last = cards[-1]
                cards[-1] = Card(last.npu, last.name, last.health, (*last.bus_ids, fields[1]))
        elif len(head) >= 2:
            cards.append(Card(int(head[0]), " ".join(head[1:]), fields[1].split()[0] if fields[1] else ""))
    return version, cards


def parse_link(text: str) -> str | None:
    """``hccn_tool -i N -link -g``: ``link status: UP`` -> ``UP`` (None: no status line)."""
    match = re.search(r"link status\s*:\s*(\w+)", text, re.IGNORECASE)
    return match.group(1).upper() if match else None


def parse_tls(text: str) -> str | None:
    """``hccn_tool -i N -tls -g``: the TLS switch, ``1`` enabled / ``0`` disabled (None: not found)."""
    match = re.search(r"tls switch\s*\[\s*(\d)\s*\]", text, re.IGNORECASE) or re.search(
        r"tls switch\s*[:=]\s*(\d)", text, re.IGNORECASE)
    return match.group(1) if match else None


def parse_ip(text: str) -> ipaddress.IPv4Interface | None:
    """``hccn_tool -i N -ip -g``: ``ipaddr:A.B.C.D`` and ``netmask:M`` -> the card's NIC address with its subnet."""
    address = re.search(r"ipaddr\s*:\s*([\d.]+)", text)
    mask = re.search(r"netmask\s*:\s*([\d.]+)", text)
    if not (address and mask):
        return None
    try:
        return ipaddress.IPv4Interface(f"{address.group(1)}/{mask.group(1)}")
    except ValueError:
        return None


def parse_visible(value: str | None) -> list[int] | None:
    """``ASCEND_RT_VISIBLE_DEVICES`` as physical ids (None: unset, every card visible); ValueError if malformed."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not all(v.isdigit() for v in items):
        raise ValueError(f"ASCEND_RT_VISIBLE_DEVICES={value!r} is not a comma list of card ids (e.g. 0,1,2,3)")
    return [int(v) for v in items]


def noset_mapping_problem(visible: list[int] | None) -> str | None:
    """Why the logical ids workers use would not be the cards Ray assigned, under
    ``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES`` (None: safe).

    With NOSET, Ray leaves each worker's ``ASCEND_RT_VISIBLE_DEVICES`` as the node has it and hands out
    physical ids; the worker then calls ``set_device(<that id>)``, which CANN reads as a *logical* index into
    the visible list (verl PR #7507: ``set_device(5)`` fails under ``4,5,6,7``). Logical i is physical
    ``visible[i]``, so the two agree only when the list is ``0..n-1``: contiguous, from 0, and complete."""
    if visible is None:
        return None
    if visible != list(range(len(visible))):
        mapping = ", ".join(f"{i}->{p}" for i, p in enumerate(visible))
        return f"logical->physical {mapping}: Ray's physical ids are not the logical ids set_device reads"
    return None

"""What one node sees, read inside a Ray task placed on that node (and, for the reference, on the driver).

Two kinds of result: **facts**, compared across nodes by :mod:`verl_ascend.cluster.compare` (package
versions, the watched environment, model and data fingerprints), and **cells** a node can judge alone
(an interface name that names no interface, a port already taken, too little memory). Everything here
reads the node's own view: its ``sys.path`` (a ``PYTHONPATH`` entry that shadows a package shows up),
the environment its Ray workers receive (the node's ``ray start`` environment plus the job's
``runtime_env``), its file system (a folder another node lacks, or that is its own disk).

Linux only, stdlib only (``/proc``, ``ioctl``): Ascend hosts are Linux, and the probe must import
nothing the node might lack.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.metadata
import ipaddress
import os
import platform
import shutil
import socket
import struct
import sys

from verl_ascend.cluster import cells
from verl_ascend.cluster.job import TOKEN_PREFIX, Job, watched

SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
               "merges.txt", "special_tokens_map.json", "tokenizer.model", "added_tokens.json",
               "model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
DATA_HEAD = 1 << 20  # bytes of a dataset hashed: enough to tell two different files apart, cheap on a 10 GB file
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
HCCL_BASE_PORT_SPAN = 16  # HCCL_IF_BASE_PORT: HCCL's host-NIC listeners take 16 ports from it (one per device)
PORT_LIMIT = 4096  # ports probed per range at most
DEVICE_COLUMNS = ("devices", "links")  # probed by the device's backend (DeviceHooks.cluster_probe)


# ----------------------------------------------------------------------------- stack
def stack_versions() -> dict[str, str]:
    """Python and every distribution verl-ascend declares (its requirements, extras included), as this
    process finds them: ``name -> "version (folder)"``, the folder being where the metadata was found."""
    names = {"verl-ascend", "verl", "torch", "ray", "transformers"}
    for requirement in importlib.metadata.requires("verl-ascend") or []:
        names.add(requirement.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("!")[0].strip())
    versions = {"python": platform.python_version()}
    for name in sorted(n for n in names if n):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        versions[name] = f"{dist.version} ({dist.locate_file('')})"
    return versions


# ----------------------------------------------------------------------------- environment
def watched_env(job: Job, environ=None) -> dict[str, str]:
    """The watched variables this process received: those the driver has or exports, and the node's own."""
    environ = os.environ if environ is None else environ
    names = set(job.driver_env) | set(job.exported) | {k for k in environ if watched(k)}
    return {name: environ[name] for name in sorted(names) if name in environ}


# ----------------------------------------------------------------------------- interfaces
def interfaces() -> dict[str, list[str]]:
    """Interface name -> its addresses (IPv4 by ioctl, IPv6 from /proc/net/if_inet6)."""
    found = {name: [] for _, name in socket.if_nameindex()}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in found:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
                found[name].append(socket.inet_ntoa(packed[20:24]))
            except OSError:
                pass
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5] in found:
                    found[parts[5]].append(str(ipaddress.IPv6Address(bytes.fromhex(parts[0]))))
    except OSError:
        pass
    return found


def match_interfaces(variable: str, value: str, available) -> tuple[list[str], list[str]]:
    """(interfaces ``value`` selects, names in it that select none). GLOO_SOCKET_IFNAME is a comma list of
    exact names (torch's ProcessGroupGloo); HCCL/NCCL/TP take prefixes, ``=name`` for an exact name and a
    leading ``^`` for an exclusion list (then nothing is "missing": the rest is used)."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if variable != "GLOO_SOCKET_IFNAME" and value.startswith("^"):
        excluded = [n.lstrip("^=") for n in names]
        return [i for i in available if not any(i.startswith(e) for e in excluded)], []
    picked, missing = [], []
    for name in names:
        if variable == "GLOO_SOCKET_IFNAME" or name.startswith("="):
            hits = [i for i in available if i == name.lstrip("=")]
        else:
            hits = [i for i in available if i.startswith(name)]
        picked += [h for h in hits if h not in picked]
        if not hits:
            missing.append(name)
    return picked, missing


def socket_cells(env: dict[str, str], nnodes: int, found: dict[str, list[str]] | None = None) -> list[cells.Cell]:
    """Each ``*_SOCKET_IFNAME`` the workers receive names interfaces that exist here and have an address."""
    found = interfaces() if found is None else found
    out = []
    for variable in IFNAME_VARS:
        value = env.get(variable)
        if value is None:
            continue
        picked, missing = match_interfaces(variable, value, found)
        bare = [i for i in picked if not found.get(i)]
        listed = ", ".join(f"{n} {'/'.join(a) or 'no address'}" for n, a in found.items())
        if missing or not picked:
            out.append(cells.fail("socket", f"{variable}={value}: no interface {', '.join(missing) or value} here",
                                  f"an interface of this node ({listed})",
                                  f"set {variable} to this node's interface on the network the nodes share (ip -o addr)"))
        elif bare:
            out.append(cells.fail("socket", f"{variable}={value}: {', '.join(bare)} has no address",
                                  "an interface with an IP address", f"bring {', '.join(bare)} up, or name another interface"))
        else:
            out.append(cells.ok("socket", f"{variable}={value}: " + ", ".join(f"{i} {'/'.join(found[i])}" for i in picked)))
    if nnodes > 1 and "GLOO_SOCKET_IFNAME" not in env:
        out.append(cells.warn("socket", "GLOO_SOCKET_IFNAME unset: gloo binds the address the host name resolves to, "
                              "often loopback (verl #967, vLLM #7074)", "GLOO_SOCKET_IFNAME naming the interface "
                              "the nodes share", "export GLOO_SOCKET_IFNAME=<interface> on every node (and "
                              "HCCL_SOCKET_IFNAME on NPU), or pass it as +ray_kwargs.ray_init.runtime_env.env_vars"))
    return out


# ----------------------------------------------------------------------------- ports
def port_ranges(env: dict[str, str]) -> list[tuple[str, int, int]]:
    """(variable, first, last) of the host port ranges the job's communication binds, from the variables the
    workers receive: ``HCCL_IF_BASE_PORT`` (16 ports from it) and ``HCCL_HOST_SOCKET_PORT_RANGE``
    (``auto``, or ``a-b`` / ``a`` items separated by commas). A value that is no port range is a ValueError."""
    out = []
    base = env.get("HCCL_IF_BASE_PORT")
    if base is not None:
        if not base.strip().isdigit() or not 0 < int(base) <= 65535 - HCCL_BASE_PORT_SPAN + 1:
            raise ValueError(f"HCCL_IF_BASE_PORT={base!r} is not a port (accepted: 1-{65536 - HCCL_BASE_PORT_SPAN})")
        out.append(("HCCL_IF_BASE_PORT", int(base), int(base) + HCCL_BASE_PORT_SPAN - 1))
    spec = env.get("HCCL_HOST_SOCKET_PORT_RANGE")
    if spec is not None and spec.strip().lower() != "auto":
        for item in spec.split(","):
            first, _, last = item.strip().partition("-")
            if not first.isdigit() or (last and not last.isdigit()) or not 0 < int(first) <= int(last or first) <= 65535:
                raise ValueError(f"HCCL_HOST_SOCKET_PORT_RANGE={spec!r}: {item.strip()!r} is no port range "
                                 "(accepted: auto, or items like 60000-60050 separated by commas)")
            out.append(("HCCL_HOST_SOCKET_PORT_RANGE", int(first), int(last or first)))
    return out


def busy_ports(address: str, first: int, last: int) -> list[int]:
    """Ports in ``first..last`` that cannot be bound on ``address`` (held by a listener, on this address or all)."""
    busy = []
    for port in range(first, min(last, first + PORT_LIMIT - 1) + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    busy.append(port)
                else:
                    raise
    return busy


def port_cells(env: dict[str, str], address: str) -> list[cells.Cell]:
    try:
        ranges = port_ranges(env)
    except ValueError as exc:
        return [cells.fail("ports", str(exc), "a port range", "fix the variable on this node or in the job's runtime_env")]
    if not ranges:
        return [cells.ok("ports", "no host port range named (HCCL_IF_BASE_PORT, HCCL_HOST_SOCKET_PORT_RANGE unset)")]
    out = []
    for variable, first, last in ranges:
        busy = busy_ports(address, first, last)
        span = f"{variable}: {first}-{last} on {address}"
        if busy:
            shown = ", ".join(map(str, busy[:8])) + (f" (+{len(busy) - 8})" if len(busy) > 8 else "")
            out.append(cells.fail("ports", f"{span}: in use {shown}", "every port of the range free",
                                  f"stop what listens there (ss -ltnp 'sport = :{busy[0]}'), or move {variable}"))
        else:
            out.append(cells.ok("ports", f"{span}: free"))
    return out


# ----------------------------------------------------------------------------- files
def sha256(path: str, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        remaining = limit
        while remaining is None or remaining > 0:
            chunk = f.read(1 << 20 if remaining is None else min(1 << 20, remaining))
            if not chunk:
                break
            digest.update(chunk)
            remaining = None if remaining is None else remaining - len(chunk)
    return digest.hexdigest()[:16]


def model_fingerprint(folder: str) -> dict[str, str]:
    """``file -> sha256`` of config and tokenizer files, ``file -> "<bytes> B"`` of the weights; or ``{"": why}``."""
    if not os.path.isdir(folder):
        return {"": "missing" if not os.path.exists(folder) else "not a folder"}
    try:
        names = sorted(os.listdir(folder))
        out = {n: sha256(os.path.join(folder, n)) for n in names if n in SMALL_FILES}
        out.update({n: f"{os.path.getsize(os.path.join(folder, n))} B" for n in names if n.endswith(WEIGHT_SUFFIXES)})
    except OSError as exc:
        return {"": f"unreadable ({exc.strerror or exc})"}
    return out


def data_fingerprint(path: str) -> str:
    """``"<bytes> B, sha256 of the first MiB"`` of a dataset file, or why it cannot be read."""
    try:
        return f"{os.path.getsize(path)} B, {sha256(path, DATA_HEAD)}"
    except FileNotFoundError:
        return "missing"
    except IsADirectoryError:
        return "a folder, not a file"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"


# ----------------------------------------------------------------------------- checkpoint folder
def write_token(job: Job, node_id: str) -> dict:
    """Create the checkpoint folder if needed and write this node's token in it; what happened (``created``: the
    topmost folder this call created, "" when the folder existed)."""
    folder = job.checkpoint_dir
    created = ""
    probe = folder
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        created, probe = probe, os.path.dirname(probe)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{TOKEN_PREFIX}{job.check_id}-{node_id}"), "w") as f:
            f.write(node_id)
    except OSError as exc:
        return {"wrote": False, "error": f"{exc.strerror or exc} ({folder})", "created": ""}
    usage = shutil.disk_usage(folder)
    return {"wrote": True, "created": created, "free": usage.free, "device": os.stat(folder).st_dev}


def read_tokens(job: Job) -> list[str]:
    """Node ids whose token of this check this node sees in the checkpoint folder."""
    prefix = f"{TOKEN_PREFIX}{job.check_id}-"
    try:
        return sorted(n[len(prefix):] for n in os.listdir(job.checkpoint_dir) if n.startswith(prefix))
    except OSError:
        return []


def remove_token(job: Job, node_id: str) -> None:
    """Remove this node's token from the checkpoint folder."""
    try:
        os.remove(os.path.join(job.checkpoint_dir, f"{TOKEN_PREFIX}{job.check_id}-{node_id}"))
    except OSError:
        pass


def remove_created(job: Job, created: str) -> None:
    """Remove the folders this node's check created (``created`` and below), once every node's token is gone.

    Why after every token: on a shared folder one node creates it and the others write their tokens into it; a
    node that removed its folders right after its own token found the others' still there and left the folder
    behind (a run folder made by a check that refused the job)."""
    folder = job.checkpoint_dir
    while created and (folder == created or folder.startswith(created + os.sep)):
        try:
            os.rmdir(folder)
        except OSError:  # not empty: something else was put there since, or another node removed it
            return
        folder = os.path.dirname(folder)


# ----------------------------------------------------------------------------- memory
def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_cell(job: Job) -> cells.Cell:
    free = available_memory()
    if free is None:
        return cells.skip("memory", "no /proc/meminfo on this node")
    need = job.host_bytes
    return cells.capacity("memory", f"{free / 2**30:.1f} GiB available", free, need,
                          f"{(need or 0) / 2**30:.1f} GiB for the offloaded states ({job.host_bytes_why})",
                          "; nothing offloaded to the host",
                          "free host memory on this node, or offload less (fsdp_config.optimizer_offload=False)")


# ----------------------------------------------------------------------------- one node
def facts(job: Job) -> dict:
    """The facts compared across nodes, as this process sees them."""
    return {
        "stack": stack_versions(),
        "env": watched_env(job),
        "files": {**{f"model {p}": model_fingerprint(p) for p in job.model_paths},
                  **{f"data {p}": {"": data_fingerprint(p)} for p in job.data_files}},
    }


def observe(job: Job, node_id: str, node_ip: str) -> dict:
    """Everything one node reports in the first round: facts, its own cells, the device's, the token written."""
    from verl_ascend.device import device_hooks

    env = watched_env(job)
    device = device_hooks(job.device).cluster_probe(job)
    own = [*socket_cells(env, job.nnodes), *port_cells(env, node_ip), memory_cell(job)]
    probed = {c.check for c in device.get("cells", [])}
    own += [cells.skip(column, f"trainer.device={job.device}: its backend has no probe for this column")
            for column in DEVICE_COLUMNS if column not in probed]
    return {
        "node_id": node_id,
        "ip": node_ip,
        "host": socket.gethostname(),
        "python": sys.executable,
        "facts": {**facts(job), **{f"device {k}": v for k, v in device.get("same", {}).items()}},
        "cells": [c.to_json() for c in [*own, *device.get("cells", [])]],
        "token": write_token(job, node_id),
    }

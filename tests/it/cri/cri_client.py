#!/usr/bin/python3
"""A CRI v1 client for the containerd tests (tests/it/cri.rs): the few RuntimeService calls
kubelet makes for a pod's network, one per invocation, the answer as JSON on stdout.

crictl is not packaged in Debian 12; this needs only Debian's python3-grpcio and
python3-protobuf, plus the message classes protoc generates from tests/it/cri/api.proto
(the test runs `protoc --python_out=STUBS`). Calls go through grpc's generic unary
stubs, so no grpc code generator is needed.

Usage: cri_client.py --socket PATH --stubs DIR COMMAND [ARGS]
  version
  run NAME UID NAMESPACE      RunPodSandbox, prints {"id": ...}
  status ID                   PodSandboxStatus (verbose): state, ip, additional_ips, netns, pid
  stop ID | remove ID         StopPodSandbox | RemovePodSandbox
  list                        ListPodSandbox: the ids
  update-cidr CIDRS           UpdateRuntimeConfig with pod_cidr CIDRS (comma-separated for dual stack)
  runtime-status              Status: the runtime's conditions
A failed call prints {"error": CODE, "message": DETAILS} and exits 1. Each call's own
duration goes to stderr as "rpc=NAME seconds=S".
"""

import argparse
import json
import sys
import time

import grpc

SERVICE = "/runtime.v1.RuntimeService/"
# A cold containerd may take a while for the first sandbox (image unpack, shim start).
TIMEOUT_S = 120


def call(channel, api, rpc, request, response_type):
    stub = channel.unary_unary(
        SERVICE + rpc,
        request_serializer=request.__class__.SerializeToString,
        response_deserializer=getattr(api, response_type).FromString,
    )
    started = time.monotonic()
    try:
        return stub(request, timeout=TIMEOUT_S)
    finally:
        # The call alone, without this process's start-up and imports (the tests report it).
        print(f"rpc={rpc} seconds={time.monotonic() - started:.3f}", file=sys.stderr)


def sandbox_status(channel, api, sandbox_id):
    resp = call(
        channel,
        api,
        "PodSandboxStatus",
        api.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
        "PodSandboxStatusResponse",
    )
    status = resp.status
    out = {
        "id": status.id,
        "state": api.PodSandboxState.Name(status.state),
        "ip": status.network.ip,
        "additional_ips": [p.ip for p in status.network.additional_ips],
        "netns": None,
        "pid": None,
    }
    # containerd puts the sandbox's OCI spec and pause PID in info["info"] (verbose only).
    info = json.loads(resp.info.get("info", "{}") or "{}")
    out["pid"] = info.get("pid")
    for ns in info.get("runtimeSpec", {}).get("linux", {}).get("namespaces", []):
        if ns.get("type") == "network":
            out["netns"] = ns.get("path")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--stubs", required=True, help="folder holding protoc's api_pb2.py")
    parser.add_argument("command")
    parser.add_argument("args", nargs="*")
    opts = parser.parse_args()
    sys.path.insert(0, opts.stubs)
    import api_pb2 as api  # noqa: E402 (generated at test time)

    channel = grpc.insecure_channel("unix://" + opts.socket)
    cmd, args = opts.command, opts.args
    try:
        if cmd == "version":
            r = call(channel, api, "Version", api.VersionRequest(version="v1"), "VersionResponse")
            out = {"runtime_name": r.runtime_name, "runtime_version": r.runtime_version,
                   "runtime_api_version": r.runtime_api_version}
        elif cmd == "run":
            # Optional after the namespace: host ports, each HOSTPORT:CONTAINERPORT (TCP).
            name, uid, namespace, *ports = args
            mappings = [api.PortMapping(protocol=api.TCP, host_port=int(h), container_port=int(c))
                        for h, c in (p.split(":") for p in ports)]
            config = api.PodSandboxConfig(
                metadata=api.PodSandboxMetadata(name=name, uid=uid, namespace=namespace),
                hostname=name,
                port_mappings=mappings,
                linux=api.LinuxPodSandboxConfig(),
            )
            r = call(channel, api, "RunPodSandbox", api.RunPodSandboxRequest(config=config),
                     "RunPodSandboxResponse")
            out = {"id": r.pod_sandbox_id}
        elif cmd == "status":
            out = sandbox_status(channel, api, args[0])
        elif cmd == "stop":
            call(channel, api, "StopPodSandbox", api.StopPodSandboxRequest(pod_sandbox_id=args[0]),
                 "StopPodSandboxResponse")
            out = {}
        elif cmd == "remove":
            call(channel, api, "RemovePodSandbox",
                 api.RemovePodSandboxRequest(pod_sandbox_id=args[0]), "RemovePodSandboxResponse")
            out = {}
        elif cmd == "list":
            r = call(channel, api, "ListPodSandbox", api.ListPodSandboxRequest(),
                     "ListPodSandboxResponse")
            out = [item.id for item in r.items]
        elif cmd == "update-cidr":
            req = api.UpdateRuntimeConfigRequest(runtime_config=api.RuntimeConfig(
                network_config=api.NetworkConfig(pod_cidr=args[0])))
            call(channel, api, "UpdateRuntimeConfig", req, "UpdateRuntimeConfigResponse")
            out = {}
        elif cmd == "runtime-status":
            r = call(channel, api, "Status", api.StatusRequest(verbose=False), "StatusResponse")
            out = [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                   for c in r.status.conditions]
        else:
            parser.error(f"unknown command {cmd}")
    except grpc.RpcError as e:
        print(json.dumps({"error": e.code().name, "message": e.details()}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

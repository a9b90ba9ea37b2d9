"""The ``memesh`` command: ``serve`` and the operator client ``admin``.

``memesh admin`` talks to the gRPC AdminService with an operator key read
from a file (never from the command line, where it would land in shell
history). Every verb prints one JSON document on stdout; failures print
``memesh: <code>: <message>`` on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_ADMIN_ADDRESS = "127.0.0.1:50051"


def _serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from cluster.serve import run
    from cluster.settings import Settings
    from mesh.errors import ConfigInvalid, MemeshError

    overrides: dict[str, Any] = {}
    for section, key, value in (
        ("ray", "address", args.ray_address),
        ("server", "host", args.host),
        ("server", "port", args.port),
        ("server", "grpc_port", args.grpc_port),
        ("server", "grpc_data_port", args.grpc_data_port),
        ("storage", "data_dir", args.data_dir),
        ("embedding", "engine", args.engine),
        ("heads", "workers", args.workers),
    ):
        if value is not None:
            overrides.setdefault(section, {})[key] = value
    try:
        # Flags override single keys: merge them over the other sources (a constructor
        # argument would replace a whole section).
        base = Settings().model_dump()
        for section, values in overrides.items():
            base[section].update(values)
        settings = Settings(**base)
        run(settings)
    except (ValidationError, ConfigInvalid, ValueError) as exc:
        print(f"memesh: config: {exc}", file=sys.stderr)
        return 2
    except MemeshError as exc:
        print(f"memesh: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    return 0


def _admin(args: argparse.Namespace) -> int:
    import grpc

    from memesh_proto import admin_pb2, admin_pb2_grpc

    try:
        key = Path(args.key_file).read_text().strip()
    except OSError as exc:
        print(f"memesh: cannot read the key file: {exc.strerror}", file=sys.stderr)
        return 2
    metadata = (("x-service-key", key),)
    if args.tls_ca:
        try:
            credentials = grpc.ssl_channel_credentials(Path(args.tls_ca).read_bytes())
        except OSError as exc:
            print(f"memesh: cannot read the CA file: {exc.strerror}", file=sys.stderr)
            return 2
        channel_cm = grpc.secure_channel(args.address, credentials)
    else:
        channel_cm = grpc.insecure_channel(args.address)
    with channel_cm as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        try:
            if args.group == "audit":
                verdict = stub.VerifyAudit(admin_pb2.Empty(), metadata=metadata, timeout=args.timeout)
                result = {"ok": verdict.ok, "rows": verdict.rows, "first_bad_seq": verdict.first_bad_seq or None}
            else:
                result = _dispatch(stub, admin_pb2, args, metadata)
        except grpc.RpcError as exc:
            print(f"memesh: {exc.code().name.lower()}: {exc.details()}", file=sys.stderr)
            return 1
    print(json.dumps(result, indent=None, sort_keys=True))
    if args.group == "audit" and not result["ok"]:
        print(f"memesh: the audit chain is broken at row {result['first_bad_seq']}", file=sys.stderr)
        return 1
    return 0


def _record(agent: Any) -> dict[str, Any]:
    return {
        "agent_id": agent.agent_id,
        "tenant_id": agent.tenant_id,
        "display_name": agent.display_name,
        "roles": list(agent.roles),
        "status": agent.status,
        "read_scope": list(agent.read_scope),
        "created_at": agent.created_at,
        "updated_at": agent.updated_at,
    }


def _dispatch(stub: Any, pb: Any, args: argparse.Namespace, metadata: Any) -> Any:
    if args.group == "agents":
        return _agents(stub, pb, args, metadata)
    return _data(stub, pb, args, metadata)


RESIZE_TIMEOUT_S = 900.0  # a resize boots new actors and moves data: minutes on a large deployment


def _data(stub: Any, pb: Any, args: argparse.Namespace, metadata: Any) -> Any:
    """partitions resize, nodes delete, erase, reembed start|job. The confirm label is the operator's to type."""
    call = {"metadata": metadata, "timeout": args.timeout}
    if args.group == "partitions":
        asked = pb.ResizePartitionsRequest(
            scene_shards=args.scene_shards or 0, beacon_sets=args.beacon_sets or 0, inbox_shards=args.inbox_shards or 0
        )
        done = stub.ResizePartitions(asked, metadata=metadata, timeout=max(args.timeout, RESIZE_TIMEOUT_S))
        moves = [
            {
                "kind": m.kind,
                "from": m.count_from,
                "to": m.count_to,
                "partitions": m.partitions,
                "rows": m.rows,
                "seconds": m.seconds,
            }
            for m in done.moves
        ]
        counts = {"scene_shards": done.scene_shards, "beacon_sets": done.beacon_sets, "inbox_shards": done.inbox_shards}
        return {**counts, "epoch": done.epoch, "moves": moves}
    if args.group == "nodes":
        stub.DeleteNode(pb.DeleteNodeRequest(node_id=args.node_id, reason=args.reason or ""), **call)
        return {"node_id": args.node_id, "ok": True}
    if args.group == "erase":
        request = pb.EraseRequest(
            scope_kind=args.kind,
            scope_id=args.id,
            scope_tenant_id=args.tenant or "",
            confirm=args.confirm,
            dry_run=args.dry_run,
        )
        cert = stub.Erase(request, **call)
        fields = ("nodes_removed", "diffs_removed", "deliveries_removed", "sessions_removed", "aggregates_recomputed")
        result = {name: getattr(cert, name) for name in (*fields, "tombstones_propagated")}
        return {**result, "digest": cert.digest or None}
    if args.verb == "start":
        return {"job_id": stub.StartReembed(pb.Empty(), **call).job_id}
    job = stub.GetJob(pb.JobRef(job_id=args.job_id), **call)
    return {
        "job_id": job.job_id,
        "status": job.status,
        "nodes_processed": job.nodes_processed,
        "nodes_total": job.nodes_total,
        "engine": job.engine,
        "started_at": job.started_at,
        "finished_at": job.finished_at or None,
    }


def _agents(stub: Any, pb: Any, args: argparse.Namespace, metadata: Any) -> Any:
    timeout = args.timeout
    verb = args.verb
    if verb == "issue":
        issued = stub.IssueAgent(
            pb.IssueAgentRequest(
                tenant_id=args.tenant,
                display_name=args.display_name,
                roles=args.role,
                read_scope=args.read_scope or [],
                credential_kind="api_key_hash",
                oidc_subject=args.oidc_subject or "",
            ),
            metadata=metadata,
            timeout=timeout,
        )
        return {"agent_id": issued.agent_id, "plaintext_secret": issued.plaintext_secret}
    if verb == "list":
        page = stub.ListAgents(
            pb.ListAgentsRequest(cursor=args.cursor or "", limit=args.limit), metadata=metadata, timeout=timeout
        )
        return {"agents": [_record(a) for a in page.agents], "next_cursor": page.next_cursor or None}
    ref = pb.AgentRef(agent_id=args.agent_id)
    if verb == "get":
        return _record(stub.GetAgent(ref, metadata=metadata, timeout=timeout))
    if verb == "rotate":
        issued = stub.RotateAgent(ref, metadata=metadata, timeout=timeout)
        return {"agent_id": issued.agent_id, "plaintext_secret": issued.plaintext_secret}
    method = {"revoke": stub.RevokeAgent, "suspend": stub.SuspendAgent, "reinstate": stub.ReinstateAgent}[verb]
    method(ref, metadata=metadata, timeout=timeout)
    return {"agent_id": args.agent_id, "ok": True}


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="memesh", description="memesh: memory for fleets of agents")
    sub = root.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the service (local Ray, LanceDB under ./data by default)")
    serve.add_argument("--ray-address", help="join this Ray cluster instead of starting a local one")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--grpc-port", type=int)
    serve.add_argument("--grpc-data-port", type=int)
    serve.add_argument("--data-dir")
    serve.add_argument("--engine", choices=["minilm", "minilm-onnx", "minilm-bf16", "hash"])
    serve.add_argument("--workers", type=int, help="head processes on this machine, sharing the ports (default 1)")
    serve.set_defaults(func=_serve)

    admin = sub.add_parser("admin", help="operator client of the gRPC admin service")
    admin.add_argument("--address", default=DEFAULT_ADMIN_ADDRESS, help=f"host:port (default {DEFAULT_ADMIN_ADDRESS})")
    admin.add_argument("--key-file", required=True, help="file holding an admin key (e.g. data/bootstrap-admin.key)")
    admin.add_argument("--timeout", type=float, default=30.0)
    admin.add_argument("--tls-ca", help="PEM CA bundle: talk TLS to a server with server.grpc_tls_certfile set")
    groups = admin.add_subparsers(dest="group", required=True)
    agents = groups.add_parser("agents", help="agent identities").add_subparsers(dest="verb", required=True)
    issue = agents.add_parser("issue", help="issue an agent and print its key once")
    issue.add_argument("--tenant", required=True)
    issue.add_argument("--role", action="append", required=True, choices=["ServiceAdmin", "ProjectAdmin", "Writer", "Reader"])
    issue.add_argument("--display-name", required=True)
    issue.add_argument("--read-scope", action="append", help="a readable project (repeat); none = the whole tenant")
    issue.add_argument("--oidc-subject", help="bind this OIDC subject: its owner logs in to the /admin console as the agent")
    listing = agents.add_parser("list", help="one page of agents")
    listing.add_argument("--cursor")
    listing.add_argument("--limit", type=int, default=50)
    verbs = {
        "get": "one agent's record",
        "revoke": "end the agent for good (its key and open streams stop at once)",
        "rotate": "issue the agent a new key and print it once (the old one stops at once)",
        "suspend": "stop the agent's key until it is reinstated",
        "reinstate": "let a suspended agent's key in again",
    }
    for verb, text in verbs.items():
        agents.add_parser(verb, help=text).add_argument("agent_id")
    audit = groups.add_parser("audit", help="the hash-chained audit log").add_subparsers(dest="verb", required=True)
    audit.add_parser("verify", help="recompute the chain; exits 1 when a row was altered")
    nodes = groups.add_parser("nodes", help="knowledge nodes").add_subparsers(dest="verb", required=True)
    delete = nodes.add_parser("delete", help="tombstone a cell or remove a beacon")
    delete.add_argument("node_id")
    delete.add_argument("--reason", choices=["user_delete", "retention", "superseded"], default="user_delete")
    erase = groups.add_parser("erase", help="erase a node, a project or an agent's data everywhere, with a certificate")
    erase.add_argument("--kind", required=True, choices=["node", "project", "agent"])
    erase.add_argument("--id", required=True)
    erase.add_argument("--tenant", help="a project scope's tenant (default: your own)")
    erase.add_argument("--confirm", required=True, help="type the scope's label <kind>:<id> yourself; it is never derived")
    erase.add_argument("--dry-run", action="store_true", help="count what would be removed; remove nothing")
    reembed = groups.add_parser("reembed", help="re-embed the corpus with the configured engine")
    reembed_verbs = reembed.add_subparsers(dest="verb", required=True)
    reembed_verbs.add_parser("start", help="start the one service-wide job")
    reembed_verbs.add_parser("job", help="a job's state").add_argument("job_id")
    partitions = groups.add_parser("partitions", help="the actors the virtual partitions are spread over")
    resize = partitions.add_subparsers(dest="verb", required=True).add_parser(
        "resize", help="move partitions while the deployment serves (set the same counts in the configuration after)"
    )
    for flag in ("--scene-shards", "--beacon-sets", "--inbox-shards"):
        resize.add_argument(flag, type=int, help="the count wanted (default: unchanged)")
    admin.set_defaults(func=_admin)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

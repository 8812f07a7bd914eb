"""Scripts a live Allot server through the client openapi-python-client
generated from its /v1/openapi.json (.ci/python-client.sh): submit, list,
show and cancel a workload, list accounts and nodes, and read the API's
error answers, all through the generated functions and models, never by
hand-written HTTP. A model or function the generator made wrong (a missing
field, a wrong type, an undocumented status) fails here.

    ALLOT_SERVER=http://127.0.0.1:8080 ALLOT_TOKEN=... python check.py
"""

import os
import sys
import time
from http import HTTPStatus

from allot_client import AuthenticatedClient
from allot_client.api.accounts import list_accounts, show_account
from allot_client.api.nodes import list_nodes
from allot_client.api.workloads import cancel_workload, list_workloads, show_workload, submit_workload
from allot_client.models import Account, Error, Node, SubmitRequest, Workload, WorkloadDetail, WorkloadState
from allot_client.types import Unset

# The server of .ci/python-client.sh: two nodes of four H100s, accounts
# org/a and org/b, the `none` executor (an attempt holds its GPUs until
# cancelled), a scheduling pass every second and a grace of one second.
NODES, GPUS_PER_NODE = 2, 4
WAIT_S = 30


class CheckFailed(Exception):
    pass


def expect(ok, what):
    if not ok:
        raise CheckFailed(what)


def wait_for(client, workload_id, state):
    """Shows the workload until it is in `state`; its detail then."""
    deadline = time.monotonic() + WAIT_S
    while True:
        detail = show_workload.sync(client=client, id=workload_id)
        expect(isinstance(detail, WorkloadDetail), f"show {workload_id}: {detail!r}")
        if detail.workload.state == state:
            return detail
        if time.monotonic() > deadline:
            raise CheckFailed(f"workload {workload_id} is {detail.workload.state} after {WAIT_S}s, not {state}")
        time.sleep(0.2)


def submit(client):
    """A workload of two GPUs, submitted with an idempotency key twice: one workload."""
    request = SubmitRequest(account="org/a", gpus=2, command=["sleep", "1"], name="python-check")
    first = submit_workload.sync_detailed(client=client, body=request, idempotency_key="python-check-1")
    expect(first.status_code == HTTPStatus.CREATED, f"submit: {first.status_code} {first.content!r}")
    workload = first.parsed
    expect(isinstance(workload, Workload), f"submit: {workload!r}")
    expect(workload.name == "python-check" and workload.account == "org/a", f"submit: {workload!r}")
    expect(workload.gpus == 2 and workload.command == ["sleep", "1"], f"submit: {workload!r}")
    expect(workload.state == WorkloadState.PENDING, f"a new workload is pending, not {workload.state}")
    again = submit_workload.sync_detailed(client=client, body=request, idempotency_key="python-check-1")
    expect(again.status_code == HTTPStatus.CREATED, f"replay: {again.status_code} {again.content!r}")
    expect(again.parsed.id == workload.id, f"the replay names {again.parsed.id}, not {workload.id}")
    expect(again.headers.get("Idempotent-Replayed") == "true", f"replay headers: {dict(again.headers)}")
    return workload.id


def refusals(client):
    """The API's error answers parse as the Error model, naming the field."""
    unknown = SubmitRequest(account="org/nope", gpus=1, command=["true"])
    r = submit_workload.sync_detailed(client=client, body=unknown)
    expect(r.status_code == HTTPStatus.BAD_REQUEST, f"unknown account: {r.status_code} {r.content!r}")
    expect(isinstance(r.parsed, Error) and r.parsed.field == "account", f"unknown account: {r.parsed!r}")
    r = show_workload.sync_detailed(client=client, id="999999")
    expect(r.status_code == HTTPStatus.NOT_FOUND, f"unknown workload: {r.status_code} {r.content!r}")
    expect(isinstance(r.parsed, Error) and isinstance(r.parsed.field, Unset), f"unknown workload: {r.parsed!r}")
    r = list_workloads.sync_detailed(client=client, state="sleeping")
    expect(r.status_code == HTTPStatus.BAD_REQUEST, f"unknown state: {r.status_code} {r.content!r}")
    expect(isinstance(r.parsed, Error) and r.parsed.field == "state", f"unknown state: {r.parsed!r}")


def running(client, workload_id):
    """Running: listed (by state and account), its attempt holds two GPUs
    on the nodes, and its account counts it."""
    detail = wait_for(client, workload_id, WorkloadState.RUNNING)
    expect(len(detail.attempts) == 1, f"attempts: {detail.attempts!r}")
    attempt = detail.attempts[0]
    expect(sum(len(n.gpus) for n in attempt.allocation) == 2, f"allocation: {attempt.allocation!r}")
    expect(attempt.end_t is None and attempt.exit_code is None, f"a running attempt: {attempt!r}")
    expect(detail.workload.on_nodes == [n.node for n in attempt.allocation], f"on_nodes: {detail.workload!r}")
    for query in ({"state": "running"}, {"account": "org/a"}, {}):
        listed = list_workloads.sync(client=client, **query)
        expect(isinstance(listed, list), f"list {query}: {listed!r}")
        expect([w.id for w in listed if w.id == workload_id] == [workload_id], f"list {query}: no {workload_id}")
    others = list_workloads.sync(client=client, account="org/b")
    expect(others == [], f"org/b has no workloads: {others!r}")

    nodes = list_nodes.sync(client=client)
    expect(isinstance(nodes, list) and all(isinstance(n, Node) for n in nodes), f"nodes: {nodes!r}")
    expect(len(nodes) == NODES and all(n.gpus == GPUS_PER_NODE for n in nodes), f"nodes: {nodes!r}")
    expect(sum(n.free_gpus for n in nodes) == NODES * GPUS_PER_NODE - 2, f"free GPUs: {nodes!r}")
    holding = [n.name for n in nodes if workload_id in n.workloads]
    expect(holding == detail.workload.on_nodes, f"nodes holding {workload_id}: {holding}")
    held = [h for n in nodes for h in n.held]
    expect([(h.workload, h.account) for h in held] == [(workload_id, "org/a")] * len(held), f"held: {held!r}")

    accounts = list_accounts.sync(client=client)
    expect(isinstance(accounts, list) and all(isinstance(a, Account) for a in accounts), f"accounts: {accounts!r}")
    paths = [a.path for a in accounts]
    expect("org/a" in paths and "org/b" in paths, f"accounts: {paths}")
    a = show_account.sync(client=client, path="org/a")
    expect(isinstance(a, Account) and a.path == "org/a", f"account org/a: {a!r}")
    expect((a.running, a.pending, a.allocated_gpus) == (1, 0, 2), f"account org/a: {a!r}")
    expect(a.budget_gpu_hours is None and a.parent == "org", f"account org/a: {a!r}")


def cancel(client, workload_id):
    """Cancelled: signalled, stopped after grace, ended; a second cancel is 409."""
    r = cancel_workload.sync_detailed(client=client, id=workload_id)
    expect(r.status_code == HTTPStatus.OK and isinstance(r.parsed, Workload), f"cancel: {r.status_code} {r.content!r}")
    expect(r.parsed.cancel_requested, f"cancel: {r.parsed!r}")
    detail = wait_for(client, workload_id, WorkloadState.CANCELLED)
    expect(detail.workload.end_t is not None, f"a cancelled workload has ended: {detail.workload!r}")
    expect(detail.attempts[-1].end_t is not None, f"its attempt has ended: {detail.attempts[-1]!r}")
    again = cancel_workload.sync_detailed(client=client, id=workload_id)
    expect(again.status_code == HTTPStatus.CONFLICT and isinstance(again.parsed, Error), f"cancel again: {again!r}")
    nodes = list_nodes.sync(client=client)
    expect(sum(n.free_gpus for n in nodes) == NODES * GPUS_PER_NODE, f"GPUs freed: {nodes!r}")


def main():
    server, token = os.environ.get("ALLOT_SERVER"), os.environ.get("ALLOT_TOKEN")
    if not server or not token:
        print("check.py: set ALLOT_SERVER (the server's URL) and ALLOT_TOKEN (an admin token)", file=sys.stderr)
        return 2
    # An answer of a status the document does not declare raises.
    with AuthenticatedClient(base_url=server, token=token, raise_on_unexpected_status=True) as client:
        try:
            workload_id = submit(client)
            refusals(client)
            running(client, workload_id)
            cancel(client, workload_id)
        except CheckFailed as e:
            print(f"check.py: {e}", file=sys.stderr)
            return 1
    print(f"check.py: workload {workload_id} submitted, listed, shown and cancelled through the generated client")
    return 0


if __name__ == "__main__":
    sys.exit(main())

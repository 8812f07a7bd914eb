#!/usr/bin/env python3
"""Server-side apply of YAML manifests to the benchmark's control plane, as
its admin (ALLOT_TEST_K8S_URL, _CA, _ADMIN_TOKEN from `.ci/k8s.sh`).

Each document's REST path comes from the API server's discovery (kind ->
resource, namespaced or not), so any kind the server serves can be applied,
custom resources included; a CustomResourceDefinition is waited for until
its kind is served, so that later documents (and a manager started next)
find it. Used by kueue.sh and side_by_side.py; Python 3.11 stdlib + PyYAML.

    kapply.py [--skip-kind Deployment ...] FILE...   ("-" reads stdin)
"""
import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

FIELD_MANAGER = "allot-bench"


class Client:
    def __init__(self, url=None, ca=None, token=None):
        self.url = url or os.environ["ALLOT_TEST_K8S_URL"]
        self.ctx = ssl.create_default_context(cafile=ca or os.environ["ALLOT_TEST_K8S_CA"])
        self.token = token or os.environ["ALLOT_TEST_K8S_ADMIN_TOKEN"]
        self._discovery = {}

    def request(self, method, path, body=None, ctype="application/json", timeout=30):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + self.token, "Content-Type": ctype,
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw or b"{}")
            except ValueError:
                return e.code, {"message": raw[:300].decode(errors="replace")}

    def resources(self, api_version, refresh=False):
        """kind -> (resource, namespaced) for one group/version, from discovery."""
        if refresh or api_version not in self._discovery:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            st, out = self.request("GET", path)
            kinds = {}
            if st == 200:
                for r in out.get("resources", []):
                    if "/" not in r["name"]:
                        kinds[r["kind"]] = (r["name"], r["namespaced"])
            self._discovery[api_version] = kinds
        return self._discovery[api_version]

    def resource_path(self, api_version, kind, namespace=None, wait_s=0.0):
        end = time.time() + wait_s
        kinds = self.resources(api_version)
        while kind not in kinds and time.time() < end:
            time.sleep(0.5)
            kinds = self.resources(api_version, refresh=True)
        if kind not in kinds:
            raise LookupError(f"the API server does not serve {kind} in {api_version}")
        resource, namespaced = kinds[kind]
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            base += f"/namespaces/{namespace or 'default'}"
        return base + "/" + resource

    def apply(self, doc, wait_s=30.0):
        """Server-side apply of one object (created or updated; our fields win)."""
        meta = doc["metadata"]
        path = self.resource_path(doc["apiVersion"], doc["kind"], meta.get("namespace"), wait_s=wait_s)
        st, out = self.request("PATCH", f"{path}/{meta['name']}?fieldManager={FIELD_MANAGER}&force=true", doc,
                               ctype="application/apply-patch+yaml")
        if st not in (200, 201):
            raise RuntimeError(f"{doc['kind']} {meta['name']}: {st} {out.get('message', out)}")
        if doc["kind"] == "CustomResourceDefinition":
            spec = doc["spec"]
            for v in spec["versions"]:
                if v.get("served", True):
                    self.resource_path(f"{spec['group']}/{v['name']}", spec["names"]["kind"], wait_s=60)
        return out


def load_docs(paths):
    import yaml  # PyYAML
    docs = []
    for p in paths:
        text = sys.stdin.read() if p == "-" else open(p).read()
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return flatten(docs)


def flatten(docs):
    """A `kind: List` (as `allot kubernetes manifests` prints) is its items."""
    out = []
    for d in docs:
        if d.get("kind") == "List" or (d.get("kind", "").endswith("List") and "items" in d):
            out.extend(flatten(d.get("items") or []))
        else:
            out.append(d)
    return out


def apply_all(client, docs, skip_kinds=()):
    applied, skipped = [], []
    # Namespaces and CRDs first: the rest may live in or be of them.
    order = {"Namespace": 0, "CustomResourceDefinition": 0}
    for doc in sorted(flatten(docs), key=lambda d: order.get(d["kind"], 1)):
        if doc["kind"] in skip_kinds:
            skipped.append(f"{doc['kind']}/{doc['metadata']['name']}")
            continue
        client.apply(doc)
        applied.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return applied, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--skip-kind", action="append", default=[], help="do not apply documents of this kind")
    args = ap.parse_args()
    client = Client()
    try:
        applied, skipped = apply_all(client, load_docs(args.files), args.skip_kind)
    except (RuntimeError, LookupError) as e:
        sys.exit(f"kapply: {e}")
    print(f"kapply: applied {len(applied)}" + (f", skipped {', '.join(skipped)}" if skipped else ""), file=sys.stderr)


if __name__ == "__main__":
    main()

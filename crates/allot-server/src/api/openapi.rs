//! The OpenAPI 3.1 document served at `/v1/openapi.json`.

use axum::Json;
use serde_json::{Value, json};

pub async fn serve() -> Json<Value> {
    Json(document())
}

fn op(summary: &str, roles: &str, body: Option<&str>, ok: (&str, &str)) -> Value {
    let mut o = json!({
        "summary": summary,
        "description": format!("Roles: {roles}."),
        "security": [{"bearer": []}],
        "responses": {
            ok.0: {"description": "success", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", ok.1)}}}},
            "400": {"$ref": "#/components/responses/Error"},
            "401": {"$ref": "#/components/responses/Error"},
            "403": {"$ref": "#/components/responses/Error"},
            "404": {"$ref": "#/components/responses/Error"},
            "409": {"$ref": "#/components/responses/Error"},
            "default": {"$ref": "#/components/responses/Error"}
        }
    });
    if let Some(b) = body {
        o["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{b}")}}}});
        o["responses"]["408"] = json!({"$ref": "#/components/responses/Error"});
        o["responses"]["415"] = json!({"$ref": "#/components/responses/Error"});
    }
    o
}

/// The error answers any request may get from the edge (docs/server.md,
/// "Limits"): 405, 414, 431, 503 and the rest, all `Error`.
fn edge_errors() -> Value {
    json!({"$ref": "#/components/responses/Error"})
}

/// `POST /v1/workloads`: the common operation, plus the idempotency key.
fn submit_op() -> Value {
    let mut o = op(
        "submit a workload (201 once committed and accepted by the scheduler)",
        "admin; manager inside the scope; researcher to granted projects",
        Some("SubmitRequest"),
        ("201", "Workload"),
    );
    o["parameters"] = json!([{
        "name": "Idempotency-Key", "in": "header", "required": false,
        "schema": {"type": "string", "minLength": 1, "maxLength": super::extract::MAX_IDEMPOTENCY_KEY, "pattern": "^[!-~][ -~]*$"},
        "description": "the same key from the same principal returns the key's workload (201 with Idempotent-Replayed: true) \
                        instead of creating another; reused with another request: 422"
    }]);
    o["responses"]["201"]["headers"] = json!({"Idempotent-Replayed": {"description": "true when the key's earlier workload is returned", "schema": {"type": "string"}}});
    o["responses"]["422"] = json!({"$ref": "#/components/responses/Error"});
    o
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}})
}

fn obj(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": props, "required": required})
}

/// The document.
pub fn document() -> Value {
    let s = json!({"type": "string"});
    let os = json!({"type": ["string", "null"]});
    let i = json!({"type": "integer"});
    let oi = json!({"type": ["integer", "null"]});
    let n = json!({"type": "number"});
    let on = json!({"type": ["number", "null"]});
    let list = |r: &str| json!({"type": "array", "items": {"$ref": format!("#/components/schemas/{r}")}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Allot", "version": env!("CARGO_PKG_VERSION"),
                 "description": "GPU-time budgets, hierarchical fair share and a time-slicing contract. Every error is {\"error\", \"field\"}; request bodies are application/json (else 415)."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
            "schemas": {
                "Error": obj(json!({"error": s, "field": s}), &["error"]),
                "SubmitRequest": obj(json!({
                    "account": {"type": "string", "description": "project path, e.g. org/llm/pretrain"},
                    "class": {"enum": ["batch", "interactive", "service"], "default": "batch"},
                    "gpus": {"type": "integer", "minimum": 1},
                    "nodes": {"type": "integer", "minimum": 0, "description": "0: any packing; k: exactly k nodes of gpus/k"},
                    "gpu_type": s,
                    "command": {"type": "array", "items": s, "minItems": 1, "description": "program and arguments, no shell"},
                    "env": {"type": "object", "additionalProperties": s},
                    "checkpoint_interval_s": {"type": "integer", "minimum": 0},
                    "expected_duration_s": {"type": "integer", "minimum": 1, "description": "default: 24 h, interactive: the lane maximum"},
                    "retries": {"type": "integer", "minimum": 0, "maximum": 100},
                    "name": s,
                    "priority": {"enum": ["low", "normal", "high", "urgent"]},
                    "preemptible": {"type": "boolean"},
                    "util": {"type": "number", "minimum": 0, "maximum": 1}
                }), &["account", "gpus", "command"]),
                "NodeGpus": obj(json!({"node": s, "gpus": {"type": "array", "items": i}}), &["node", "gpus"]),
                "Workload": obj(json!({
                    "id": s, "name": os, "account": s, "user": s, "class": s, "gpus": i, "nodes": i, "gpu_type": os,
                    "command": {"type": "array", "items": s}, "env": {"type": "object"},
                    "expected_duration_s": i, "checkpoint_interval_s": i, "retries": i, "failures": i,
                    "state": {"enum": ["pending", "running", "stopping", "finished", "failed", "cancelled", "rejected"]},
                    "reason": os, "submit_t": i, "end_t": oi, "cancel_requested": {"type": "boolean"}
                }), &["id", "account", "state"]),
                "Attempt": obj(json!({
                    "attempt": i, "state": s, "allocation": list("NodeGpus"), "start_t": i, "start_reason": s,
                    "signal_t": oi, "signal_reason": os, "end_t": oi,
                    "outcome": {"type": ["string", "null"], "enum": ["finished", "failed", "preempted", "cancelled", "node-failed", "lost", "launch-failed", null]},
                    "exit_code": oi, "kept_s": oi, "pid": oi, "log_path": s
                }), &["attempt", "state"]),
                "WorkloadDetail": obj(json!({"workload": {"$ref": "#/components/schemas/Workload"}, "attempts": list("Attempt"), "why": os}), &["workload", "attempts"]),
                "WorkloadList": list("Workload"),
                "Account": obj(json!({
                    "path": s, "parent": os, "depth": i, "share": n, "explicit_share": {"type": "boolean"},
                    "budget_gpu_hours": on, "used_gpu_hours": n, "remaining_gpu_hours": on, "charged_gpu_hours": n,
                    "allocated_gpus": i, "entitled_share": n, "fair_share": on, "over_budget": {"type": ["boolean", "null"]},
                    "pending": i, "running": i, "period_start_t": i
                }), &["path"]),
                "AccountList": list("Account"),
                "AccountChange": obj(json!({"budget_gpu_hours": on, "share": on}), &[]),
                "Node": obj(json!({"name": s, "pool": s, "rack": i, "gpu_type": s, "gpus": i, "free_gpus": i,
                                   "health": {"enum": ["up", "draining", "drained", "down"]}, "workloads": {"type": "array", "items": s}}), &["name"]),
                "NodeList": list("Node"),
                "TokenRequest": obj(json!({"name": s, "role": {"enum": ["admin", "manager", "researcher", "metrics"]}, "scope": s,
                                           "projects": {"type": "array", "items": s}}), &["name", "role"]),
                "TokenCreated": obj(json!({"name": s, "role": s, "token": s}), &["name", "role", "token"]),
                "Token": obj(json!({"name": s, "role": s, "scope": os, "projects": {"type": "array", "items": s}, "created_t": i, "created_by": s}), &["name"]),
                "TokenList": list("Token"),
                "Audit": obj(json!({"t": i, "principal": s, "action": s, "target": s, "before": {}, "after": {}}), &["t"]),
                "AuditList": list("Audit"),
                "Principal": obj(json!({"name": s, "role": s, "scope": os, "projects": {"type": "array", "items": s}}), &["name", "role"])
            }
        },
        "paths": {
            "/v1/health": {"get": {"summary": "liveness", "responses": {"200": {"description": "ok", "content": {"application/json": {}}}, "default": edge_errors()}}},
            "/v1/openapi.json": {"get": {"summary": "this document", "responses": {"200": {"description": "ok", "content": {"application/json": {}}}, "default": edge_errors()}}},
            "/v1/whoami": {"get": op("the caller's principal", "any", None, ("200", "Principal"))},
            "/v1/workloads": {
                "post": submit_op(),
                "get": {"parameters": [
                            {"name": "account", "in": "query", "schema": s, "description": "subtree"},
                            {"name": "state", "in": "query", "schema": s, "description": "comma-separated states"},
                            {"name": "user", "in": "query", "schema": s},
                            {"name": "class", "in": "query", "schema": s},
                            {"name": "limit", "in": "query", "schema": i}],
                        "summary": "list workloads the caller sees, newest first",
                        "security": [{"bearer": []}],
                        "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WorkloadList"}}}},
                                      "400": {"$ref": "#/components/responses/Error"}, "401": {"$ref": "#/components/responses/Error"},
                                      "default": edge_errors()}}
            },
            "/v1/workloads/{id}": {"parameters": [path_param("id")],
                "get": op("a workload, its attempts and why it is pending or was stopped", "whoever sees its account", None, ("200", "WorkloadDetail"))},
            "/v1/workloads/{id}/cancel": {"parameters": [path_param("id")],
                "post": op("cancel (a running workload is signalled and stopped after grace)", "admin; manager inside the scope; researcher own workloads", None, ("200", "Workload"))},
            "/v1/accounts": {"get": op("accounts the caller sees, parents first", "any (filtered)", None, ("200", "AccountList"))},
            "/v1/accounts/{path}": {"parameters": [path_param("path")],
                "get": op("one account", "whoever sees it", None, ("200", "Account")),
                "patch": op("set budget_gpu_hours and/or share (null: back to the config); audited", "admin; manager strictly inside the scope", Some("AccountChange"), ("200", "Account"))},
            "/v1/nodes": {"get": op("nodes with health and free GPUs", "any", None, ("200", "NodeList"))},
            "/v1/nodes/{name}/{action}": {"parameters": [path_param("name"), {"name": "action", "in": "path", "required": true, "schema": {"enum": ["drain", "undrain", "fail", "repair"]}}],
                "post": op("drain (preempt under the contract, then out of service), undrain, fail, repair", "admin", None, ("200", "Node"))},
            "/v1/tokens": {
                "get": op("tokens (never their secrets)", "admin", None, ("200", "TokenList")),
                "post": op("create a token; its text is shown once", "admin", Some("TokenRequest"), ("201", "TokenCreated"))},
            "/v1/tokens/{name}": {"parameters": [path_param("name")],
                "delete": {"summary": "revoke a token", "security": [{"bearer": []}],
                           "responses": {"204": {"description": "revoked"}, "401": {"$ref": "#/components/responses/Error"},
                                         "403": {"$ref": "#/components/responses/Error"}, "404": {"$ref": "#/components/responses/Error"},
                                         "default": edge_errors()}}},
            "/v1/audit": {"get": op("budget, share and token changes: who, when, before, after", "admin", None, ("200", "AuditList"))},
            "/metrics": {"get": {"summary": "Prometheus text exposition (per-account series for admin and metrics tokens only)", "security": [{"bearer": []}],
                                 "responses": {"200": {"description": "metrics", "content": {"application/openmetrics-text": {}}},
                                               "401": {"$ref": "#/components/responses/Error"}, "default": edge_errors()}}}
        }
    })
}

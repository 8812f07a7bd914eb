//! The OpenAPI 3.1 document served at `/v1/openapi.json`, generated from
//! the handlers' `#[utoipa::path]` attributes and the request and response
//! types of [`crate::views`]; every error answer is [`super::ApiErrors`].
//! Its test walks the router's own table ([`super::routes`]).

use axum::Json;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{admin, budgets, conditions, login, workloads};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Allot",
        description = "GPU-time budgets, hierarchical fair share and a time-slicing contract. Every error is \
                       {\"error\", \"field\"}; request bodies are application/json (else 415)."
    ),
    paths(
        admin::health,
        serve,
        admin::whoami,
        login::info,
        login::munge,
        login::sessions,
        login::end_session,
        workloads::submit,
        workloads::list,
        workloads::show,
        workloads::cancel,
        conditions::cancel_many,
        conditions::hold,
        conditions::release,
        conditions::hold_one,
        conditions::release_one,
        workloads::checkpoint,
        workloads::log,
        admin::accounts,
        admin::account,
        admin::change_account,
        admin::create_account,
        admin::account_tree,
        admin::import_tree,
        admin::nodes,
        admin::node_action,
        admin::reload,
        admin::tokens,
        admin::create_token,
        admin::revoke_token,
        admin::audit,
        budgets::list,
        budgets::report,
        admin::metrics,
    ),
    components(schemas(crate::views::ErrorBody)),
    modifiers(&Bearer, &Names)
)]
pub struct ApiDoc;

/// The `bearer` security scheme the operations name.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The name (`operationId`, unique) and group (its one tag) of every
/// operation: what a client generated from the document calls its
/// functions and modules (`allot_client.api.workloads.submit_workload`,
/// docs/server.md, "Scripting Allot from Python"). Method, path, tag, id.
const OPERATIONS: &[(&str, &str, &str, &str)] = &[
    ("get", "/v1/health", "server", "health"),
    ("get", "/v1/openapi.json", "server", "openapi_document"),
    ("get", "/v1/whoami", "server", "whoami"),
    ("get", "/v1/login", "sessions", "login_methods"),
    ("post", "/v1/login/munge", "sessions", "login_munge"),
    ("get", "/v1/sessions", "sessions", "list_sessions"),
    ("delete", "/v1/sessions/{id}", "sessions", "end_session"),
    ("get", "/metrics", "server", "metrics"),
    ("post", "/v1/workloads", "workloads", "submit_workload"),
    ("get", "/v1/workloads", "workloads", "list_workloads"),
    ("get", "/v1/workloads/{id}", "workloads", "show_workload"),
    ("post", "/v1/workloads/{id}/cancel", "workloads", "cancel_workload"),
    ("post", "/v1/workloads/{id}/checkpoint", "workloads", "report_checkpoint"),
    ("get", "/v1/workloads/{id}/log", "workloads", "workload_log"),
    ("post", "/v1/workloads/cancel", "workloads", "cancel_workloads"),
    ("post", "/v1/workloads/hold", "workloads", "hold_workloads"),
    ("post", "/v1/workloads/release", "workloads", "release_workloads"),
    ("post", "/v1/workloads/{id}/hold", "workloads", "hold_workload"),
    ("post", "/v1/workloads/{id}/release", "workloads", "release_workload"),
    ("get", "/v1/accounts", "accounts", "list_accounts"),
    ("post", "/v1/accounts", "accounts", "create_account"),
    ("get", "/v1/accounts/{path}", "accounts", "show_account"),
    ("patch", "/v1/accounts/{path}", "accounts", "change_account"),
    ("get", "/v1/account-tree", "accounts", "export_account_tree"),
    ("put", "/v1/account-tree", "accounts", "import_account_tree"),
    ("get", "/v1/budget-events", "budgets", "list_budget_events"),
    ("get", "/v1/budget-report", "budgets", "budget_report"),
    ("get", "/v1/nodes", "nodes", "list_nodes"),
    ("post", "/v1/nodes/{name}/{action}", "nodes", "node_action"),
    ("post", "/v1/admin/reload", "admin", "reload_config"),
    ("get", "/v1/tokens", "tokens", "list_tokens"),
    ("post", "/v1/tokens", "tokens", "create_token"),
    ("delete", "/v1/tokens/{name}", "tokens", "revoke_token"),
    ("get", "/v1/audit", "audit", "list_audit"),
];

/// Names every operation of [`OPERATIONS`] (utoipa would name it after
/// its handler: two `list`s, a `serve`, groups after Rust modules).
struct Names;

impl Modify for Names {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for (path, item) in doc.paths.paths.iter_mut() {
            let ops = [
                ("get", &mut item.get),
                ("put", &mut item.put),
                ("post", &mut item.post),
                ("delete", &mut item.delete),
                ("patch", &mut item.patch),
            ];
            for (method, op) in ops {
                let Some(op) = op else { continue };
                if let Some((.., tag, id)) = OPERATIONS.iter().find(|(m, p, ..)| *m == method && p == path) {
                    op.tags = Some(vec![tag.to_string()]);
                    op.operation_id = Some(id.to_string());
                }
            }
        }
    }
}

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[utoipa::path(get, path = "/v1/openapi.json", summary = "this document",
    responses((status = 200, description = "ok", body = Object), super::ApiErrors))]
pub async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(document())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::super::{ErrorKind, routes};
    use super::*;

    fn doc() -> Value {
        serde_json::to_value(document()).expect("the document serialises")
    }

    /// Every `$ref` under `v`.
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r);
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_route_is_documented_with_every_error_the_api_answers() {
        let doc = doc();
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{}", doc["openapi"]);
        let mut served = BTreeSet::new();
        for route in routes() {
            // axum's `{*rest}` is OpenAPI's `{rest}`.
            let path = route.path.replace("{*", "{");
            let method = route.method.as_str().to_lowercase();
            let op = &doc["paths"][&path][&method];
            assert!(op.is_object(), "{} {} is served but not in the OpenAPI document", route.method, route.path);
            let responses = op["responses"].as_object().expect("responses");
            assert!(responses.keys().any(|s| s.starts_with('2')), "{method} {path}: no success answer");
            for kind in ErrorKind::ALL {
                let status = kind.status();
                let schema = &responses.get(status.as_str()).unwrap_or(&Value::Null)["content"]["application/json"]["schema"]
                    ["$ref"];
                assert_eq!(schema, "#/components/schemas/Error", "{method} {path}: {status} ({kind:?}) undeclared");
            }
            if op.get("security").is_some() {
                assert_eq!(op["security"][0]["bearer"], serde_json::json!([]), "{method} {path}");
            }
            served.insert((path, method));
        }
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys().filter(|k| *k != "parameters") {
                let key = (path.clone(), method.clone());
                assert!(served.contains(&key), "{method} {path} is documented but not served");
            }
        }
    }

    /// Every operation has its name and group from [`OPERATIONS`]: one
    /// tag, an id that is a snake_case identifier (a generated client's
    /// function and module names) and unique, as OpenAPI requires; no entry
    /// names an operation the document does not have.
    #[test]
    fn every_operation_has_one_unique_name_for_generated_clients() {
        let doc = doc();
        let mut ids = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item").iter().filter(|(k, _)| *k != "parameters") {
                let (.., tag, id) = OPERATIONS
                    .iter()
                    .find(|(m, p, ..)| m == method && p == path)
                    .unwrap_or_else(|| panic!("{method} {path} has no name in OPERATIONS"));
                assert_eq!(op["operationId"], *id, "{method} {path}");
                assert_eq!(op["tags"], serde_json::json!([tag]), "{method} {path}");
                let snake = |s: &str| {
                    s.starts_with(|c: char| c.is_ascii_lowercase())
                        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                };
                assert!(snake(id) && snake(tag), "{method} {path}: {tag}.{id} is not a snake_case identifier");
                assert!(ids.insert(*id), "operationId {id} twice");
            }
        }
        assert_eq!(ids.len(), OPERATIONS.len(), "OPERATIONS names an operation the document does not have");
    }

    /// The simplest value of `schema`: its required properties only, each
    /// the first value of its enum, "x", 0, false, [] or {} (a nullable
    /// one as its other type).
    fn minimal(doc: &Value, schema: &Value) -> Value {
        if let Some(name) = schema["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")) {
            return minimal(doc, &doc["components"]["schemas"][name]);
        }
        if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
            return first.clone();
        }
        if let Some(one) = schema["oneOf"].as_array() {
            return one.iter().find(|s| s["type"] != "null").map_or(Value::Null, |s| minimal(doc, s));
        }
        let ty = match &schema["type"] {
            Value::String(t) => t.as_str(),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null"),
            _ => "object",
        };
        match ty {
            "object" => {
                let required = schema["required"].as_array().cloned().unwrap_or_default();
                let props = required.iter().filter_map(Value::as_str);
                Value::Object(props.map(|p| (p.to_string(), minimal(doc, &schema["properties"][p]))).collect())
            }
            "array" => serde_json::json!([]),
            "string" => serde_json::json!("x"),
            "integer" | "number" => serde_json::json!(0),
            "boolean" => serde_json::json!(false),
            _ => Value::Null,
        }
    }

    /// What is wrong with the required properties of `name`, the schema of
    /// `T`: those a value read from its required properties alone
    /// serialises are its required ones, no more, no fewer.
    fn required_mismatch<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value, name: &str) -> Option<String> {
        let schema = &doc["components"]["schemas"][name];
        assert!(schema.is_object(), "no schema {name}");
        let value: T = serde_json::from_value(minimal(doc, schema))
            .unwrap_or_else(|e| panic!("{name}: its required properties do not make one: {e}"));
        let back = serde_json::to_value(value).expect("serialises");
        let present: BTreeSet<&str> = back.as_object().expect("an object").keys().map(String::as_str).collect();
        let required: BTreeSet<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let unrequired: Vec<_> = present.difference(&required).collect();
        let absent: Vec<_> = required.difference(&present).collect();
        (!unrequired.is_empty() || !absent.is_empty())
            .then(|| format!("{name}: always there, not required {unrequired:?}; required, absent {absent:?}"))
    }

    /// A response body's required properties are exactly those it always
    /// has: one serialised even when empty (`null`, `[]`, `false`) is
    /// required, so that a generated client types it `T | None`, never
    /// "maybe absent"; one left out when empty is not.
    #[test]
    fn response_bodies_require_exactly_the_properties_they_always_have() {
        use crate::views::*;
        let doc = doc();
        let wrong: Vec<String> = [
            required_mismatch::<WorkloadView>(&doc, "Workload"),
            required_mismatch::<ArrayView>(&doc, "ArrayElement"),
            required_mismatch::<BulkResult>(&doc, "BulkResult"),
            required_mismatch::<WorkloadDetail>(&doc, "WorkloadDetail"),
            required_mismatch::<AttemptView>(&doc, "Attempt"),
            required_mismatch::<AttemptTelemetry>(&doc, "AttemptTelemetry"),
            required_mismatch::<NodeGpusView>(&doc, "NodeGpus"),
            required_mismatch::<NodeView>(&doc, "Node"),
            required_mismatch::<NodeHold>(&doc, "NodeHold"),
            required_mismatch::<AccountView>(&doc, "Account"),
            required_mismatch::<AccountEdits>(&doc, "AccountEdits"),
            required_mismatch::<TokenView>(&doc, "Token"),
            required_mismatch::<TokenCreated>(&doc, "TokenCreated"),
            required_mismatch::<AuditView>(&doc, "Audit"),
            required_mismatch::<CheckpointView>(&doc, "Checkpoint"),
            required_mismatch::<ErrorBody>(&doc, "Error"),
        ]
        .into_iter()
        .flatten()
        .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// A parameter (path, query, header) is absent or text, never `null`:
    /// none is nullable, or a generated client would accept `None` for it
    /// and send nothing sensible.
    #[test]
    fn no_parameter_is_nullable() {
        let doc = doc();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                for p in op["parameters"].as_array().into_iter().flatten() {
                    let ty = &p["schema"]["type"];
                    let nullable = ty == "null" || ty.as_array().is_some_and(|t| t.iter().any(|t| t == "null"));
                    assert!(!nullable, "{method} {path}: parameter {} is nullable: {}", p["name"], p["schema"]);
                }
            }
        }
    }

    /// A workload's state is an enum of every state the server stores.
    #[test]
    fn a_workloads_state_is_an_enum_of_the_stored_states() {
        let doc = doc();
        let state = &doc["components"]["schemas"]["Workload"]["properties"]["state"];
        assert_eq!(state["$ref"], "#/components/schemas/WorkloadState", "{state}");
        let states: Vec<&str> = crate::states::PHASES.iter().map(|p| p.as_str()).collect();
        assert_eq!(doc["components"]["schemas"]["WorkloadState"]["enum"], serde_json::json!(states));
    }

    #[test]
    fn the_error_schema_is_the_error_body_and_every_reference_resolves() {
        let doc = doc();
        let error = &doc["components"]["schemas"]["Error"];
        assert_eq!(error["required"], serde_json::json!(["error"]), "{error}");
        assert!(error["properties"]["field"].is_object(), "{error}");
        assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        for schema in ["SubmitRequest", "Workload"] {
            let clusters = &doc["components"]["schemas"][schema]["properties"]["clusters"];
            assert_eq!(clusters["type"], "array", "{schema}.clusters (FLEET-1): {clusters}");
        }
        for schema in ["Workload", "Attempt", "Node"] {
            let cluster = &doc["components"]["schemas"][schema]["properties"]["cluster"];
            assert!(cluster.is_object(), "{schema}.cluster: {cluster}");
        }
        for (path, method) in [("/v1/workloads", "get"), ("/v1/nodes", "get")] {
            let params = doc["paths"][path][method]["parameters"].as_array().expect("parameters");
            assert!(params.iter().any(|p| p["name"] == "cluster" && p["in"] == "query"), "{method} {path}: {params:?}");
        }
        let mut found = Vec::new();
        refs(&doc, &mut found);
        for r in found {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("unexpected $ref {r}"));
            assert!(doc["components"]["schemas"][name].is_object(), "{r} does not resolve");
        }
    }
}

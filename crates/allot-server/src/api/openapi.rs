//! The OpenAPI 3.1 document served at `/v1/openapi.json`, generated from
//! the handlers' `#[utoipa::path]` attributes and the request and response
//! types of [`crate::views`]; every error answer is [`super::ApiErrors`].
//! Its test walks the router's own table ([`super::routes`]).

use axum::Json;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{admin, budgets, conditions, workloads};

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
        admin::tokens,
        admin::create_token,
        admin::revoke_token,
        admin::audit,
        budgets::list,
        budgets::report,
        admin::metrics,
    ),
    components(schemas(crate::views::ErrorBody)),
    modifiers(&Bearer)
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

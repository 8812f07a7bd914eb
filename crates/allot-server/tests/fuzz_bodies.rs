//! Fuzzing the submission body: any bytes sent to `POST /v1/workloads` are
//! parsed and checked without a panic, into either a workload to store or a
//! 400 that says what is wrong and, when a field is at fault, names a field
//! of the request. Inputs are random bytes, random JSON, and valid requests
//! with fields replaced by values of every JSON type; case counts are
//! bounded.

use allot_core::PolicyKind;
use allot_server::api::parse_json;
use allot_server::submission::Catalog;
use allot_server::views::SubmitRequest;
use proptest::prelude::*;
use serde_json::{Value, json};

const CONFIG: &str = r#"
[cluster]
name = "fuzz"
[[cluster.pools]]
name = "gpu"
gpu = "H100"
nodes = 2
gpus_per_node = 4
[[accounts]]
path = "org/a"
[[accounts]]
path = "org/b"
[contract]
interactive_max_gpus = 4
"#;

/// The request's keys, as the API names them in errors.
const FIELDS: [&str; 14] = [
    "account",
    "class",
    "gpus",
    "nodes",
    "gpu_type",
    "command",
    "env",
    "checkpoint_interval_s",
    "expected_duration_s",
    "retries",
    "name",
    "priority",
    "preemptible",
    "util",
];

fn catalog() -> std::sync::Arc<Catalog> {
    let cfg = allot_trace::config::parse_config(CONFIG, "fuzz.toml").expect("config");
    let template = allot_core::State::new(cfg.cluster, cfg.accounts, cfg.contract);
    Catalog::new(template, PolicyKind::Allot)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("json numbers are finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![Just("org/a".to_string()), Just("interactive".to_string()), Just("H100".to_string()), ".{0,12}"]
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(".{0,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid request with some fields set to arbitrary values, some removed
/// and perhaps an unknown key.
fn mutated_request() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec((0..FIELDS.len(), json_value()), 0..4),
        proptest::collection::vec(0..FIELDS.len(), 0..2),
        proptest::option::of(".{1,8}"),
    )
        .prop_map(|(set, drop, extra)| {
            let mut v = json!({"account": "org/a", "gpus": 2, "command": ["sleep", "1"], "env": {"A": "b"}});
            for (i, x) in set {
                v[FIELDS[i]] = x;
            }
            for i in drop {
                v.as_object_mut().expect("object").remove(FIELDS[i]);
            }
            if let Some(k) = extra {
                v[k.as_str()] = json!(1);
            }
            serde_json::to_vec(&v).expect("json")
        })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => mutated_request(),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).expect("json")),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => mutated_request().prop_flat_map(|b| {
            let n = b.len();
            (Just(b), 0..n.max(1)).prop_map(|(mut b, cut)| {
                b.truncate(cut);
                b
            })
        }),
    ]
}

/// An admin: every account may be submitted to, so only the body decides.
fn fuzzer() -> allot_server::auth::Principal {
    allot_server::auth::Principal {
        name: "fuzzer".into(),
        role: allot_server::auth::Role::Admin,
        scopes: Vec::new(),
        projects: Vec::new(),
        token_id: "fuzzer".into(),
        unix_user: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_body_is_a_workload_or_a_named_400(bytes in body()) {
        let cat = catalog();
        match parse_json::<SubmitRequest>(&bytes) {
            Err(e) => {
                prop_assert_eq!(e.status().as_u16(), 400);
                prop_assert!(e.error.starts_with("malformed json") || e.error.starts_with("invalid request"), "{}", e.error);
            }
            Ok(req) => match cat.check(&req, &fuzzer(), 1_000) {
                Ok((row, spec)) => {
                    prop_assert_eq!(row.account, req.account);
                    prop_assert!(spec.gpus >= 1);
                }
                Err(e) => {
                    // A field, or a path inside one: `env.NAME`, `command[2]`.
                    let root = e.field.split(['.', '[']).next().unwrap_or("");
                    prop_assert!(FIELDS.contains(&root), "unknown field {:?}: {}", e.field, e.message);
                    prop_assert!(!e.message.is_empty());
                }
            },
        }
    }
}

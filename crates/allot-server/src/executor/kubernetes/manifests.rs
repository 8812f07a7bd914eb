//! What the cluster's admin applies once (`allot kubernetes manifests`),
//! as typed Kubernetes objects: the creation policy (K8S-1), the update
//! policy (K8S-3), Allot's ClusterRole and its binding (K8S-9), and a
//! Deployment of `allot serve`. Allot's own identity never holds the right
//! to create admission policies: the admin applies these.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1 as adm;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, Namespace, PodSpec,
    PodTemplateSpec, SecretKeySelector, ServiceAccount, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde_json::Value;

use super::{ACCOUNT, ATTEMPT, MANAGED, NODES, STORE, SUBMITTED_BY, USER, WORKLOAD};

/// Where the Deployment runs and who Allot is.
#[derive(Clone, Debug)]
pub struct ManifestOptions {
    /// The user name the API server gives Allot (its ServiceAccount's,
    /// `system:serviceaccount:<ns>/<name>`, by default).
    pub identity: String,
    /// Bind the ClusterRole to this user instead of the ServiceAccount.
    pub user: Option<String>,
    pub namespace: String,
    pub image: String,
    /// The contract's grace, seconds: every managed pod's
    /// `terminationGracePeriodSeconds`.
    pub grace_s: u64,
    pub scheduler_name: String,
    /// The config file the Deployment runs with.
    pub config_text: String,
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() }
}

fn managed_selector() -> LabelSelector {
    LabelSelector { match_labels: Some(BTreeMap::from([(MANAGED.into(), "true".into())])), ..Default::default() }
}

fn jobs_rule(operation: &str) -> adm::MatchResources {
    adm::MatchResources {
        object_selector: Some(managed_selector()),
        resource_rules: Some(vec![adm::NamedRuleWithOperations {
            api_groups: Some(vec!["batch".into()]),
            api_versions: Some(vec!["v1".into()]),
            operations: Some(vec![operation.into()]),
            resources: Some(vec!["jobs".into()]),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// A CEL string literal.
fn cel(s: &str) -> String {
    format!("{:?}", s)
}

/// K8S-1: at creation, every managed Job is suspended, its creator
/// recorded, its pods given Allot's scheduler name, the contract's grace
/// and the `managed` label, and the Job controller's retries are off (a
/// pod's failure fails the Job, so Allot's failure rules decide; a
/// disruption — a deleted Node, a preemption — is ignored by the Job
/// controller and left to Allot).
pub fn creation_policy(o: &ManifestOptions) -> (adm::MutatingAdmissionPolicy, adm::MutatingAdmissionPolicyBinding) {
    // K8S-12: a Job Allot created names its submitter, who is its user;
    // anyone else's Job is its creator's, whatever it names.
    let creator = format!(
        "(request.userInfo.username == {me} && has(object.metadata.annotations) && {by} in object.metadata.annotations \
         ? object.metadata.annotations[{by}] : request.userInfo.username)",
        me = cel(&o.identity),
        by = cel(SUBMITTED_BY),
    );
    let expression = format!(
        "Object{{\n  metadata: Object.metadata{{annotations: {{{user}: {creator}}}}},\n  \
         spec: Object.spec{{\n    suspend: true,\n    backoffLimit: 0,\n    podReplacementPolicy: \"Failed\",\n    \
         template: Object.spec.template{{\n      metadata: Object.spec.template.metadata{{labels: {{{managed}: \"true\"}}}},\n      \
         spec: Object.spec.template.spec{{schedulerName: {sched}, terminationGracePeriodSeconds: {grace}, restartPolicy: \"Never\"}}\n    }}\n  }}\n}}",
        user = cel(USER),
        managed = cel(MANAGED),
        sched = cel(&o.scheduler_name),
        grace = o.grace_s,
    );
    let failure_policy = "[JSONPatch{op: \"add\", path: \"/spec/podFailurePolicy\", value: \
        Object.spec.podFailurePolicy{rules: [Object.spec.podFailurePolicy.rules{action: \"Ignore\", \
        onPodConditions: [Object.spec.podFailurePolicy.rules.onPodConditions{type: \"DisruptionTarget\", status: \"True\"}]}]}}]";
    let policy = adm::MutatingAdmissionPolicy {
        metadata: meta("allot-admit"),
        spec: Some(adm::MutatingAdmissionPolicySpec {
            match_constraints: Some(jobs_rule("CREATE")),
            failure_policy: Some("Fail".into()),
            reinvocation_policy: Some("IfNeeded".into()),
            mutations: Some(vec![
                adm::Mutation {
                    patch_type: "ApplyConfiguration".into(),
                    apply_configuration: Some(adm::ApplyConfiguration { expression: Some(expression) }),
                    json_patch: None,
                },
                // A list is atomic to an apply configuration: the pod
                // failure policy is set whole, by a JSON patch.
                adm::Mutation {
                    patch_type: "JSONPatch".into(),
                    apply_configuration: None,
                    json_patch: Some(adm::JSONPatch { expression: Some(failure_policy.into()) }),
                },
            ]),
            ..Default::default()
        }),
    };
    let binding = adm::MutatingAdmissionPolicyBinding {
        metadata: meta("allot-admit"),
        spec: Some(adm::MutatingAdmissionPolicyBindingSpec {
            policy_name: Some("allot-admit".into()),
            ..Default::default()
        }),
    };
    (policy, binding)
}

/// K8S-3: after creation, only Allot unsuspends or suspends a managed
/// Job, changes its pod template (its placement), the annotations it owns,
/// or takes the `managed` label off.
pub fn update_policy(o: &ManifestOptions) -> (adm::ValidatingAdmissionPolicy, adm::ValidatingAdmissionPolicyBinding) {
    let allot = format!("request.userInfo.username == {}", cel(&o.identity));
    let owned: Vec<String> =
        [ACCOUNT, USER, SUBMITTED_BY, WORKLOAD, STORE, ATTEMPT, NODES].iter().map(|k| cel(k)).collect();
    let ann = |obj: &str| {
        format!(
            "(has({obj}.metadata.annotations) && k in {obj}.metadata.annotations ? {obj}.metadata.annotations[k] : '')"
        )
    };
    let check = |expression: String, message: &str| adm::Validation {
        expression: format!("{allot} || {expression}"),
        message: Some(message.into()),
        reason: Some("Forbidden".into()),
        message_expression: None,
    };
    let validations = vec![
        check(
            "object.spec.suspend == oldObject.spec.suspend".into(),
            "K8S-3: only Allot suspends or unsuspends a managed Job (it admits and preempts it); \
             to stop it, delete it or run `allot cancel`",
        ),
        check(
            "object.spec.template == oldObject.spec.template".into(),
            "K8S-3: only Allot changes a managed Job's pod template (where its pods run)",
        ),
        check(
            format!("[{}].all(k, {} == {})", owned.join(", "), ann("object"), ann("oldObject")),
            "K8S-3: the annotations allot.dev/account, user, submitted-by, workload, store, attempt and nodes are \
             set once; create a new Job to charge another account",
        ),
        check(
            format!(
                "has(object.metadata.labels) && {m} in object.metadata.labels && object.metadata.labels[{m}] == 'true'",
                m = cel(MANAGED)
            ),
            "K8S-3: a managed Job stays managed; delete it instead",
        ),
    ];
    let policy = adm::ValidatingAdmissionPolicy {
        metadata: meta("allot-guard"),
        spec: Some(adm::ValidatingAdmissionPolicySpec {
            match_constraints: Some(jobs_rule("UPDATE")),
            failure_policy: Some("Fail".into()),
            validations: Some(validations),
            ..Default::default()
        }),
        status: None,
    };
    let binding = adm::ValidatingAdmissionPolicyBinding {
        metadata: meta("allot-guard"),
        spec: adm::ValidatingAdmissionPolicyBindingSpec {
            policy_name: "allot-guard".into(),
            validation_actions: vec!["Deny".into()],
            ..Default::default()
        },
    };
    (policy, binding)
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// K8S-9: exactly the verbs Allot uses (docs/kubernetes.md lists why).
pub fn cluster_role() -> ClusterRole {
    ClusterRole {
        metadata: meta("allot"),
        rules: Some(vec![
            rule("", &["nodes"], &["get", "list", "watch"]),
            rule("", &["pods"], &["get", "list", "watch", "delete"]),
            rule("", &["pods/binding"], &["create"]),
            rule("batch", &["jobs"], &["get", "list", "watch", "patch", "create"]),
            rule("events.k8s.io", &["events"], &["create", "patch"]),
        ]),
        aggregation_rule: None,
    }
}

pub fn cluster_role_binding(o: &ManifestOptions) -> ClusterRoleBinding {
    let subject = match &o.user {
        Some(u) => Subject {
            kind: "User".into(),
            name: u.clone(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        },
        None => Subject {
            kind: "ServiceAccount".into(),
            name: "allot".into(),
            namespace: Some(o.namespace.clone()),
            api_group: None,
        },
    };
    ClusterRoleBinding {
        metadata: meta("allot"),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "allot".into(),
        },
        subjects: Some(vec![subject]),
    }
}

/// `allot serve` in the cluster: one replica (a standby can run beside it:
/// the store's lease lets one act), its config from a ConfigMap, its store
/// URL from the Secret `allot-db` (key `url`).
pub fn deployment(o: &ManifestOptions) -> (Namespace, ServiceAccount, ConfigMap, Deployment) {
    let ns =
        |name: &str| ObjectMeta { name: Some(name.into()), namespace: Some(o.namespace.clone()), ..Default::default() };
    let labels = BTreeMap::from([("app".to_string(), "allot".to_string())]);
    let container = Container {
        name: "allot".into(),
        image: Some(o.image.clone()),
        args: Some(
            [
                "serve",
                "--config",
                "/etc/allot/allot.toml",
                "--db",
                "$(ALLOT_DB)",
                "--data-dir",
                "/var/lib/allot",
                "--listen",
                "0.0.0.0:8080",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ),
        env: Some(vec![EnvVar {
            name: "ALLOT_DB".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector { name: "allot-db".into(), key: "url".into(), optional: None }),
                ..Default::default()
            }),
            value: None,
        }]),
        ports: Some(vec![ContainerPort { container_port: 8080, name: Some("http".into()), ..Default::default() }]),
        volume_mounts: Some(vec![VolumeMount {
            name: "config".into(),
            mount_path: "/etc/allot".into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let deploy = Deployment {
        metadata: ObjectMeta { labels: Some(labels.clone()), ..ns("allot") },
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector { match_labels: Some(labels.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    service_account_name: Some("allot".into()),
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "config".into(),
                        config_map: Some(ConfigMapVolumeSource { name: "allot-config".into(), ..Default::default() }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        status: None,
    };
    let config = ConfigMap {
        metadata: ns("allot-config"),
        data: Some(BTreeMap::from([("allot.toml".to_string(), o.config_text.clone())])),
        ..Default::default()
    };
    (
        Namespace { metadata: meta(&o.namespace), ..Default::default() },
        ServiceAccount { metadata: ns("allot"), ..Default::default() },
        config,
        deploy,
    )
}

/// Every manifest, as one `v1` List that `kubectl apply -f -` takes.
/// `with_deployment`: also the namespace, ServiceAccount, ConfigMap and
/// Deployment of `allot serve` in the cluster.
pub fn all(o: &ManifestOptions, with_deployment: bool) -> Value {
    fn item<K: k8s_openapi::Resource + serde::Serialize>(k: &K) -> Value {
        let mut v = serde_json::to_value(k).expect("a Kubernetes object serialises");
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), K::API_VERSION.into());
            m.insert("kind".into(), K::KIND.into());
        }
        v
    }
    let (map, mapb) = creation_policy(o);
    let (vap, vapb) = update_policy(o);
    let mut items =
        vec![item(&map), item(&mapb), item(&vap), item(&vapb), item(&cluster_role()), item(&cluster_role_binding(o))];
    if with_deployment {
        let (n, sa, cm, d) = deployment(o);
        items.extend([item(&n), item(&sa), item(&cm), item(&d)]);
    }
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
}

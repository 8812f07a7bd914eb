//! A managed Job read as a workload (K8S-1): its account, class and
//! durations from annotations, its gang from `parallelism`, its GPUs per
//! pod from the GPU resource's limit. What can be said from the Job alone
//! is checked here; the rest (account, shape, fit) by the API's own check
//! of every submission ([`crate::submission::Catalog::check`]).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;

use super::{ACCOUNT, CHECKPOINT, CLASS, EXPECTED, KubeOptions, USER};

/// A managed Job as Allot reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobShape {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The creator, as the creation policy recorded it.
    pub user: Option<String>,
    pub account: String,
    pub class: Option<String>,
    pub expected_s: Option<u64>,
    pub checkpoint_s: Option<u64>,
    /// Pods of the gang (`parallelism`), each on a node of its own.
    pub pods: u32,
    pub gpus_per_pod: u32,
    /// The accounts its namespace and creator may charge (K8S-2).
    pub grants: Vec<String>,
}

impl JobShape {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn gpus(&self) -> u32 {
        self.pods.saturating_mul(self.gpus_per_pod)
    }
}

/// A Job that cannot be a workload, and why.
pub type Refused = Box<(JobShape, String)>;

/// Reads `job`; `Err` says, naming the field, why it cannot be a
/// workload. A Job Allot refuses keeps waiting, suspended, with the reason
/// on it (K8S-6).
pub fn read(job: &Job, opts: &KubeOptions) -> Result<JobShape, Refused> {
    let meta = &job.metadata;
    let ann: BTreeMap<String, String> = meta.annotations.clone().unwrap_or_default();
    let spec = job.spec.clone().unwrap_or_default();
    let pod = spec.template.spec.clone().unwrap_or_default();
    let per_pod: u32 = pod
        .containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(&opts.gpu_resource))
        .map(|q| q.0.trim().parse::<u32>().unwrap_or(0))
        .sum();
    let parallelism = spec.parallelism.unwrap_or(1).max(0) as u32;
    let user = ann.get(USER).cloned();
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let mut shape = JobShape {
        namespace: namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        user: user.clone(),
        account: ann.get(ACCOUNT).cloned().unwrap_or_default(),
        class: ann.get(CLASS).cloned(),
        expected_s: None,
        checkpoint_s: None,
        pods: parallelism,
        gpus_per_pod: per_pod,
        grants: opts.grants(&namespace, user.as_deref()),
    };
    let fail = |shape: &JobShape, why: String| Err(Box::new((shape.clone(), why)));
    if user.is_none() {
        return fail(
            &shape,
            format!(
                "K8S-1: annotation {USER} is missing: Allot's creation policy did not run on this Job \
                 (the cluster's admin applies `allot kubernetes manifests`)"
            ),
        );
    }
    if spec.suspend != Some(true) && meta.annotations.as_ref().is_none_or(|a| !a.contains_key(super::WORKLOAD)) {
        return fail(&shape, "K8S-1: the Job is not suspended: Allot's creation policy did not run on it".into());
    }
    if shape.account.trim().is_empty() {
        return fail(
            &shape,
            format!("K8S-1: annotation {ACCOUNT} is missing: name the account to charge (e.g. org/team)"),
        );
    }
    for key in [EXPECTED, CHECKPOINT] {
        if let Some(v) = ann.get(key) {
            match allot_trace::duration::parse_duration(v) {
                Ok(s) if key == EXPECTED => shape.expected_s = Some(s),
                Ok(s) => shape.checkpoint_s = Some(s),
                Err(e) => return Err(Box::new((shape, format!("K8S-1: annotation {key}: {e}")))),
            }
        }
    }
    if let Some(bad) = pod.containers.iter().find_map(|c| {
        let q = c.resources.as_ref()?.limits.as_ref()?.get(&opts.gpu_resource)?;
        q.0.trim().parse::<u32>().is_err().then(|| (c.name.clone(), q.0.clone()))
    }) {
        return fail(
            &shape,
            format!(
                "K8S-1: container {}: resources.limits[{:?}] = {:?} is not a whole number",
                bad.0, opts.gpu_resource, bad.1
            ),
        );
    }
    if per_pod == 0 {
        return fail(
            &shape,
            format!(
                "K8S-1: the Job requests no GPUs: set resources.limits[{:?}] on its container (GPUs per pod)",
                opts.gpu_resource
            ),
        );
    }
    if parallelism == 0 {
        return fail(&shape, "K8S-1: parallelism is 0: the Job would run no pod".into());
    }
    let completions = spec.completions.map(|c| c.max(0) as u32);
    if completions != Some(parallelism) {
        let got = completions.map(|c| c.to_string()).unwrap_or_else(|| "unset".into());
        return fail(
            &shape,
            format!(
                "K8S-1: completions ({got}) must equal parallelism ({parallelism}): Allot admits a Job as one gang \
                 of `parallelism` pods that start together and each complete once"
            ),
        );
    }
    if spec.completion_mode.as_deref().unwrap_or("NonIndexed") != "Indexed" && parallelism > 1 {
        return fail(
            &shape,
            "K8S-1: a gang of several pods must be an Indexed Job (completionMode: Indexed): pod i runs on the \
             allocation's node i"
                .into(),
        );
    }
    if !opts.may_charge(&shape.namespace, shape.user.as_deref(), &shape.account) {
        let grants = if shape.grants.is_empty() { "none".to_string() } else { shape.grants.join(", ") };
        let msg = format!(
            "K8S-2: namespace {:?} and user {:?} may not charge account {:?} (they may charge: {grants}; \
             the cluster's [clusters.executor] namespaces and users say who may charge what)",
            shape.namespace,
            shape.user.as_deref().unwrap_or("?"),
            shape.account
        );
        return Err(Box::new((shape, msg)));
    }
    Ok(shape)
}

/// The API submission of a Job: charged to its account, on this cluster,
/// named after it; its "command" says which Job runs (the executor never
/// runs it as a command).
pub fn request(job: &JobShape, cluster: &str) -> crate::views::SubmitRequest {
    crate::views::SubmitRequest {
        account: job.account.clone(),
        class: job.class.clone(),
        gpus: job.gpus(),
        nodes: Some(job.pods),
        clusters: vec![cluster.to_string()],
        command: vec!["kubernetes-job".into(), job.key()],
        expected_duration_s: job.expected_s,
        checkpoint_interval_s: job.checkpoint_s,
        name: Some(job.key()),
        ..Default::default()
    }
}

/// What a Job Allot creates for a submission that names an image
/// (K8S-12) is made of, checked by the API beforehand.
#[derive(Clone, Debug)]
pub struct NewJob<'a> {
    pub req: &'a crate::views::SubmitRequest,
    pub image: &'a str,
    pub namespace: String,
    /// Who submitted it (the API's principal): the Job's user.
    pub submitter: &'a str,
    /// The Job's name; `None`: generated from the submission's name.
    pub name: Option<String>,
    /// ID-1: the submitter's Unix identity, which the pod runs as (its
    /// uid, primary gid and other groups); `None` on a `--single-user`
    /// server: the image's own non-root user.
    pub run_as: Option<&'a crate::identity::UnixUser>,
}

/// The managed Job of a submission that names an image (K8S-12): labelled
/// as the cluster's `job_selector` says, annotated with the account,
/// class, durations and submitter, `nodes` pods (Indexed) of `gpus /
/// nodes` GPUs each, running `command` (the image's entrypoint when empty)
/// with `env` and `workdir`. Created unsuspended or not, the creation
/// policy suspends it, as every managed Job.
pub fn build(new: &NewJob<'_>, opts: &KubeOptions) -> Result<Job, String> {
    use k8s_openapi::api::batch::v1::JobSpec;
    use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec, ResourceRequirements};
    let (mut pod_security, container_security) = locked_down();
    if let Some(u) = new.run_as {
        pod_security.run_as_user = Some(i64::from(u.uid));
        pod_security.run_as_group = Some(i64::from(u.gid));
        let others: Vec<i64> = u.groups.iter().filter(|&&g| g != u.gid).map(|&g| i64::from(g)).collect();
        pod_security.supplemental_groups = (!others.is_empty()).then_some(others);
    }
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    let req = new.req;
    let pods = req.nodes.filter(|n| *n > 0).unwrap_or(1);
    let mut ann = BTreeMap::from([
        (ACCOUNT.to_string(), req.account.clone()),
        (super::SUBMITTED_BY.to_string(), new.submitter.to_string()),
    ]);
    if let Some(c) = &req.class {
        ann.insert(CLASS.into(), c.clone());
    }
    if let Some(s) = req.expected_duration_s {
        ann.insert(EXPECTED.into(), format!("{s}s"));
    }
    if let Some(s) = req.checkpoint_interval_s {
        ann.insert(CHECKPOINT.into(), format!("{s}s"));
    }
    let limits = BTreeMap::from([(opts.gpu_resource.clone(), Quantity((req.gpus / pods).to_string()))]);
    let container = Container {
        name: "main".into(),
        image: Some(new.image.to_string()),
        command: (!req.command.is_empty()).then(|| req.command.clone()),
        env: (!req.env.is_empty()).then(|| {
            req.env.iter().map(|(k, v)| EnvVar { name: k.clone(), value: Some(v.clone()), value_from: None }).collect()
        }),
        working_dir: req.workdir.clone(),
        resources: Some(ResourceRequirements { limits: Some(limits), ..Default::default() }),
        security_context: Some(container_security),
        ..Default::default()
    };
    let generate_name = new.name.is_none().then(|| format!("{}-", job_name_prefix(req.name.as_deref())));
    Ok(Job {
        metadata: ObjectMeta {
            name: new.name.clone(),
            generate_name,
            namespace: Some(new.namespace.clone()),
            labels: Some(opts.job_labels()?),
            annotations: Some(ann),
            ..Default::default()
        },
        spec: Some(JobSpec {
            suspend: Some(true),
            parallelism: Some(pods as i32),
            completions: Some(pods as i32),
            completion_mode: Some("Indexed".into()),
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![container],
                    restart_policy: Some("Never".into()),
                    automount_service_account_token: Some(false),
                    security_context: Some(pod_security),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// K8S-12: the security contexts of a Job Allot makes of a submission, as
/// Pod Security's `restricted` profile asks: the pod runs as a non-root
/// user under the runtime's default seccomp profile; its container drops
/// every capability and may not gain privileges. (The pod also mounts no
/// service-account token: [`build`].) An image whose user is root fails
/// to start, by design.
fn locked_down() -> (k8s_openapi::api::core::v1::PodSecurityContext, k8s_openapi::api::core::v1::SecurityContext) {
    use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, SeccompProfile, SecurityContext};
    let pod = PodSecurityContext {
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        ..Default::default()
    };
    let container = SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
        ..Default::default()
    };
    (pod, container)
}

/// A Job name's first part from a submission's name: lower-case letters,
/// digits and dashes (DNS-1123), at most 40 characters; `allot` when
/// nothing is left.
pub fn job_name_prefix(name: Option<&str>) -> String {
    let mut out = String::new();
    for c in name.unwrap_or_default().chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' };
        if !(c == '-' && (out.is_empty() || out.ends_with('-'))) && out.len() < 40 {
            out.push(c);
        }
    }
    let out = out.trim_end_matches('-');
    if out.is_empty() { "allot".into() } else { out.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(yaml: serde_json::Value) -> Job {
        serde_json::from_value(yaml).unwrap()
    }

    fn opts() -> KubeOptions {
        let mut o = KubeOptions { gpu_resource: "nvidia.com/gpu".into(), ..Default::default() };
        o.namespaces.insert("team-a".into(), vec!["org/a".into()]);
        o.users.insert("carol".into(), vec!["org/b".into()]);
        o
    }

    fn base(ns: &str, user: &str, account: &str, gpus: &str, n: i32) -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "train", "namespace": ns, "uid": "u1",
                         "labels": {"allot.dev/managed": "true"},
                         "annotations": {"allot.dev/account": account, "allot.dev/user": user,
                                         "allot.dev/expected-duration": "2h"}},
            "spec": {"suspend": true, "parallelism": n, "completions": n, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [{"name": "t", "image": "x",
                        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}
        })
    }

    #[test]
    fn reads_a_gang() {
        let s = read(&job(base("team-a", "alice", "org/a/x", "8", 2)), &opts()).unwrap();
        assert_eq!((s.pods, s.gpus_per_pod, s.gpus(), s.expected_s), (2, 8, 16, Some(7200)));
        let r = request(&s, "k8s");
        assert_eq!((r.gpus, r.nodes, r.clusters.as_slice()), (16, Some(2), ["k8s".to_string()].as_slice()));
    }

    /// K8S-12: the namespace, labels and shape of a Job Allot creates.
    #[test]
    fn an_image_becomes_a_job_in_the_most_specific_namespace() {
        let mut o = opts();
        o.cluster = "k8s".into();
        o.namespaces.insert("team-a-llm".into(), vec!["org/a/llm".into()]);
        o.job_selector = "allot.dev/managed=true,allot.dev/test==t1".into();
        let ns = |account: &str, asked: Option<&str>| o.namespace_for(account, asked);
        assert_eq!(ns("org/a/llm/x", None).unwrap(), "team-a-llm", "the most specific grant");
        assert_eq!(ns("org/a/cv", None).unwrap(), "team-a");
        assert_eq!(ns("org/a/llm/x", Some("team-a")).unwrap(), "team-a", "asked for and allowed");
        let err = ns("org/a/cv", Some("team-a-llm")).unwrap_err();
        assert!(err.contains("may not charge \"org/a/cv\" (these may: team-a)"), "{err}");
        assert!(ns("org/b", None).unwrap_err().contains("no namespace of cluster k8s may charge \"org/b\""));
        let req = crate::views::SubmitRequest {
            account: "org/a/cv".into(),
            gpus: 16,
            nodes: Some(2),
            command: vec!["python".into(), "train.py".into()],
            expected_duration_s: Some(3600),
            name: Some("My Run: 7B!".into()),
            ..Default::default()
        };
        let new = carol_job(&req);
        let j = build(&new, &o).unwrap();
        assert_eq!(j.metadata.generate_name.as_deref(), Some("my-run-7b-"));
        let labels = j.metadata.labels.clone().unwrap();
        assert_eq!((labels["allot.dev/managed"].as_str(), labels["allot.dev/test"].as_str()), ("true", "t1"));
        let mut made = j.clone();
        made.metadata.namespace = Some("team-a".into());
        made.metadata.annotations.as_mut().unwrap().insert(USER.into(), "carol".into());
        let shape = read(&made, &o).unwrap();
        assert_eq!((shape.pods, shape.gpus_per_pod, shape.expected_s), (2, 8, Some(3600)), "read back as built");
        o.job_selector = "allot.dev/managed=true,tier in (a,b)".into();
        assert!(build(&new, &o).unwrap_err().contains("\"tier in (a,b)\" is not key=value"));
    }

    /// carol's Job of `req`, image `trainer:1` in `team-a`, run as no one in particular.
    fn carol_job(req: &crate::views::SubmitRequest) -> NewJob<'_> {
        NewJob { req, image: "trainer:1", namespace: "team-a".into(), submitter: "carol", name: None, run_as: None }
    }

    /// K8S-12: the pod of a Job Allot creates runs as a non-root user under
    /// the runtime's default seccomp profile, its container with no
    /// capabilities and no privilege escalation, and without the
    /// namespace's service-account token.
    #[test]
    fn an_image_job_is_locked_down() {
        let mut o = opts();
        o.job_selector = "allot.dev/managed=true".into();
        let req = crate::views::SubmitRequest {
            account: "org/a".into(),
            gpus: 1,
            command: vec!["python".into()],
            ..Default::default()
        };
        let new = carol_job(&req);
        let j = serde_json::to_value(build(&new, &o).unwrap()).unwrap();
        let pod = &j["spec"]["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false, "{pod}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{pod}");
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault", "{pod}");
        let c = &pod["containers"][0]["securityContext"];
        assert_eq!(c["allowPrivilegeEscalation"], false, "{c}");
        assert_eq!(c["capabilities"]["drop"], serde_json::json!(["ALL"]), "{c}");
        assert!(pod["securityContext"].get("runAsUser").is_none(), "single-user: the image's own user: {pod}");

        // ID-1: on a multi-user server the pod runs as its submitter.
        let carol = crate::identity::UnixUser {
            name: "carol".into(),
            uid: 61003,
            gid: 61003,
            groups: vec![61003, 61011, 61012],
            group_names: vec!["carol".into(), "nlp".into(), "vision".into()],
            home: "/home/carol".into(),
            shell: "/bin/sh".into(),
        };
        let new = NewJob { run_as: Some(&carol), ..new };
        let j = serde_json::to_value(build(&new, &o).unwrap()).unwrap();
        let psc = &j["spec"]["template"]["spec"]["securityContext"];
        assert_eq!(psc["runAsUser"], 61003, "{psc}");
        assert_eq!(psc["runAsGroup"], 61003, "{psc}");
        assert_eq!(psc["supplementalGroups"], serde_json::json!([61011, 61012]), "{psc}");
        assert_eq!(psc["runAsNonRoot"], true, "{psc}");
    }

    /// K8S-12: a namespace runs only the images its list allows; without a
    /// list, none.
    #[test]
    fn images_are_allowed_per_namespace() {
        let mut o = opts();
        o.cluster = "k8s".into();
        o.namespaces.insert("open".into(), vec!["org/o".into()]);
        o.images.insert("team-a".into(), vec!["registry.example.org/team/*".into(), "busybox:1.36".into()]);
        o.images.insert("open".into(), vec!["*".into()]);
        let cases = [
            ("team-a", "registry.example.org/team/trainer:1", true),
            ("team-a", "registry.example.org/team/sub/x@sha256:ab", true),
            ("team-a", "busybox:1.36", true),
            ("team-a", "busybox:1.37", false),
            ("team-a", "registry.example.org/teamevil/x", false),
            ("team-a", "evil.example/registry.example.org/team/x", false),
            ("open", "anything:latest", true),
            ("team-b", "busybox:1.36", false),
        ];
        for (ns, image, ok) in cases {
            assert_eq!(o.image_allowed(ns, image).is_ok(), ok, "{ns} {image}");
        }
        let e = o.image_allowed("team-a", "evil:1").unwrap_err();
        assert!(
            e.contains("namespace \"team-a\" of cluster k8s may not run image \"evil:1\"")
                && e.contains("only registry.example.org/team/*, busybox:1.36"),
            "{e}"
        );
        let e = o.image_allowed("team-b", "busybox:1.36").unwrap_err();
        assert!(e.contains("lists none for it"), "{e}");
    }

    #[test]
    fn refusals_name_the_field() {
        let cases: [(serde_json::Value, &str); 5] = [
            (
                base("team-a", "alice", "org/b", "8", 1),
                "K8S-2: namespace \"team-a\" and user \"alice\" may not charge account \"org/b\" (they may charge: org/a",
            ),
            (base("team-b", "carol", "org/b/p", "4", 1), ""),
            (base("team-a", "alice", "org/a", "0", 1), "requests no GPUs"),
            (base("team-a", "alice", "", "1", 1), "annotation allot.dev/account is missing"),
            (base("team-a", "alice", "org/a", "lots", 1), "is not a whole number"),
        ];
        for (j, want) in cases {
            match read(&job(j), &opts()) {
                Ok(_) => assert!(want.is_empty(), "accepted; wanted {want}"),
                Err(r) => assert!(!want.is_empty() && r.1.contains(want), "{}", r.1),
            }
        }
        let mut j = base("team-a", "alice", "org/a", "8", 2);
        j["spec"]["completions"] = serde_json::json!(4);
        assert!(read(&job(j), &opts()).unwrap_err().1.contains("completions (4) must equal parallelism (2)"));
        let mut j = base("team-a", "alice", "org/a", "8", 1);
        j["metadata"]["annotations"].as_object_mut().unwrap().remove("allot.dev/user");
        assert!(read(&job(j), &opts()).unwrap_err().1.contains("creation policy did not run"));
    }
}

//! The OCI image's recipe (packaging/oci/Containerfile) agrees with the
//! Deployment `allot kubernetes manifests --deployment` prints: the port
//! the container listens on, the config's and the data directory's paths,
//! an unprivileged user, and the entry point the Deployment's arguments
//! are given to. (Building the image needs a container builder, which CI
//! does not have; docs/operations.md says so.)

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The value of the Containerfile's last `KEY …` instruction (of the final stage).
fn instruction<'a>(file: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key} ");
    file.lines().rev().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {key} in the Containerfile"))
}

#[test]
fn the_image_serves_what_the_deployment_asks() {
    let file =
        std::fs::read_to_string(root().join("packaging/oci/Containerfile")).expect("packaging/oci/Containerfile");
    let out = Command::new(env!("CARGO_BIN_EXE_allot"))
        .args(["kubernetes", "manifests", "--deployment", "--image", "registry.example.org/allot:1", "--config"])
        .arg(root().join("examples/fleet-kubernetes.toml"))
        .output()
        .expect("run allot kubernetes manifests");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON List");
    let deploy = list["items"].as_array().unwrap().iter().find(|i| i["kind"] == "Deployment").expect("a Deployment");
    let c = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example.org/allot:1");
    let args: Vec<&str> = c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let after = |flag: &str| args.iter().position(|a| *a == flag).map(|i| args[i + 1]).unwrap_or_default();

    // The Deployment gives arguments only: the image's entry point is allot.
    assert!(c.get("command").is_none_or(|v| v.is_null()), "{c}");
    assert_eq!(instruction(&file, "ENTRYPOINT"), r#"["/usr/bin/allot"]"#);
    assert_eq!(args[0], "serve");
    // The port.
    let port = c["ports"][0]["containerPort"].as_u64().unwrap();
    assert_eq!(instruction(&file, "EXPOSE"), port.to_string());
    assert_eq!(after("--listen"), format!("0.0.0.0:{port}"));
    // The config: the ConfigMap is mounted where the image makes /etc/allot.
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    assert_eq!(mount, "/etc/allot");
    assert!(after("--config").starts_with("/etc/allot/"), "{args:?}");
    assert!(file.contains("install -d -m 0755 /etc/allot"), "the image makes /etc/allot");
    // The data directory: the image's working directory, its user's.
    assert_eq!(after("--data-dir"), instruction(&file, "WORKDIR"));
    assert!(file.contains(&format!("-o allot -g allot -m 0700 {}", after("--data-dir"))), "the data dir is allot's");
    // Not root.
    let user = instruction(&file, "USER");
    assert!(!user.starts_with('0') && !user.starts_with("root"), "USER {user}");
    // The default command is the Deployment's, but for the store.
    let cmd: Vec<String> = serde_json::from_str(instruction(&file, "CMD")).expect("CMD as JSON");
    for flag in ["--config", "--data-dir", "--listen"] {
        let i = cmd.iter().position(|a| a == flag).unwrap_or_else(|| panic!("CMD has no {flag}"));
        assert_eq!(cmd[i + 1], after(flag), "{flag}");
    }
    // The build uses the lock file, and the release profile's line tables.
    assert!(file.contains("cargo build --release --locked -p allot"));
}

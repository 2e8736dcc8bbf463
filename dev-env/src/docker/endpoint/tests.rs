use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::*;

/// Resolves with `vars` as the environment and `home` as the user's home.
fn resolve_with(vars: &[(&str, &str)], home: &Path) -> Result<Candidates, Error> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let var = move |key: &str| vars.get(key).cloned();
    resolve(&Lookup {
        var: &var,
        home: Some(home.to_path_buf()),
    })
}

/// A context as `docker context create` writes it under `config`.
fn write_context(config: &Path, name: &str, host: &str, tls: bool) {
    let id = context_id(name);
    let meta = config.join("contexts/meta").join(&id);
    std::fs::create_dir_all(&meta).unwrap();
    let text = serde_json::json!({
        "Name": name,
        "Metadata": {"Description": name},
        "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": false}},
    });
    std::fs::write(meta.join("meta.json"), text.to_string()).unwrap();
    if tls {
        let dir = config.join("contexts/tls").join(&id).join("docker");
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::write(dir.join(file), "-----BEGIN CERTIFICATE-----\n").unwrap();
        }
    }
}

fn only(candidates: Candidates) -> Resolved {
    assert!(candidates.fallbacks.is_empty(), "{candidates:?}");
    candidates.explicit.expect("an explicit endpoint")
}

#[test]
fn a_contexts_files_are_named_by_the_sha256_of_its_name() {
    assert_eq!(
        context_id("desktop-linux"),
        "fe9c6bd7a66301f49ca9b6a70b217107cd1284598bfc254700c989b916da791e"
    );
    assert_eq!(
        context_id("colima"),
        "f24fd3749c1368328e2b149bec149cb6795619f244c5b584e844961215dadd16"
    );
}

#[test]
fn docker_host_comes_first_then_docker_context_then_the_current_context() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join(".docker");
    write_context(
        &config,
        "colima",
        "unix:///h/.colima/default/docker.sock",
        false,
    );
    write_context(
        &config,
        "desktop-linux",
        "unix:///h/.docker/desktop/docker.sock",
        false,
    );
    std::fs::write(
        config.join("config.json"),
        r#"{"auths":{},"currentContext":"desktop-linux"}"#,
    )
    .unwrap();

    let current = only(resolve_with(&[], home.path()).unwrap());
    assert_eq!(
        current.endpoint,
        Endpoint::Unix(PathBuf::from("/h/.docker/desktop/docker.sock"))
    );
    assert_eq!(current.source.to_string(), "context `desktop-linux`");

    let named = only(resolve_with(&[("DOCKER_CONTEXT", "colima")], home.path()).unwrap());
    assert_eq!(
        named.endpoint,
        Endpoint::Unix(PathBuf::from("/h/.colima/default/docker.sock"))
    );
    assert_eq!(
        named.source.to_string(),
        "context `colima` (DOCKER_CONTEXT)"
    );

    let host = only(
        resolve_with(
            &[
                ("DOCKER_HOST", "unix:///run/other.sock"),
                ("DOCKER_CONTEXT", "colima"),
            ],
            home.path(),
        )
        .unwrap(),
    );
    assert_eq!(
        host.endpoint,
        Endpoint::Unix(PathBuf::from("/run/other.sock"))
    );
    assert_eq!(host.source, Source::DockerHost);
}

#[test]
fn the_default_context_and_no_choice_try_the_default_socket_then_each_users_sockets() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join(".docker");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.json"),
        r#"{"currentContext":"default"}"#,
    )
    .unwrap();
    let found = resolve_with(&[("XDG_RUNTIME_DIR", "/run/user/1000")], home.path()).unwrap();
    assert_eq!(found.explicit, None);
    let listed: Vec<String> = found
        .fallbacks
        .iter()
        .map(|r| format!("{} {}", r.source, r.endpoint))
        .collect();
    let h = home.path().display();
    assert_eq!(
        listed,
        [
            "the default socket unix:///var/run/docker.sock".to_string(),
            "rootless Docker's socket unix:///run/user/1000/docker.sock".to_string(),
            format!("Docker Desktop's socket unix://{h}/.docker/run/docker.sock"),
            format!("Docker Desktop's socket unix://{h}/.docker/desktop/docker.sock"),
            format!("colima's socket unix://{h}/.colima/default/docker.sock"),
            format!("OrbStack's socket unix://{h}/.orbstack/run/docker.sock"),
            format!("Rancher Desktop's socket unix://{h}/.rd/docker.sock"),
            "Podman's socket unix:///run/user/1000/podman/podman.sock".to_string(),
        ]
    );
}

#[test]
fn docker_config_moves_the_contexts_and_a_missing_context_is_named_with_its_file() {
    let home = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    write_context(elsewhere.path(), "ci", "unix:///ci/docker.sock", false);
    let config = elsewhere.path().to_str().unwrap();
    let found = only(
        resolve_with(
            &[("DOCKER_CONFIG", config), ("DOCKER_CONTEXT", "ci")],
            home.path(),
        )
        .unwrap(),
    );
    assert_eq!(
        found.endpoint,
        Endpoint::Unix(PathBuf::from("/ci/docker.sock"))
    );

    let missing = resolve_with(
        &[("DOCKER_CONFIG", config), ("DOCKER_CONTEXT", "gone")],
        home.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        missing.contains("context `gone` (named by DOCKER_CONTEXT)"),
        "{missing}"
    );
    assert!(missing.contains(&context_id("gone")), "{missing}");
    assert!(missing.contains("docker context ls"), "{missing}");
}

#[test]
fn tcp_hosts_take_tls_from_docker_tls_verify_and_docker_cert_path_or_the_context() {
    let home = tempfile::tempdir().unwrap();
    let plain = only(resolve_with(&[("DOCKER_HOST", "tcp://10.0.0.5")], home.path()).unwrap());
    assert_eq!(
        plain.endpoint,
        Endpoint::Tcp {
            address: "10.0.0.5:2375".into(),
            tls: None
        }
    );
    let verified = only(
        resolve_with(
            &[
                ("DOCKER_HOST", "tcp://10.0.0.5:2376"),
                ("DOCKER_TLS_VERIFY", "1"),
                ("DOCKER_CERT_PATH", "/certs"),
            ],
            home.path(),
        )
        .unwrap(),
    );
    assert_eq!(
        verified.endpoint,
        Endpoint::Tcp {
            address: "10.0.0.5:2376".into(),
            tls: Some(Tls {
                ca: "/certs/ca.pem".into(),
                cert: "/certs/cert.pem".into(),
                key: "/certs/key.pem".into(),
            })
        }
    );
    let config = home.path().join(".docker");
    write_context(&config, "remote", "tcp://build.lan:2376", true);
    let context = only(resolve_with(&[("DOCKER_CONTEXT", "remote")], home.path()).unwrap());
    let Endpoint::Tcp { address, tls } = context.endpoint else {
        panic!("{context:?}");
    };
    assert_eq!(address, "build.lan:2376");
    assert!(tls.unwrap().ca.ends_with("docker/ca.pem"));
}

#[test]
fn unverified_tls_ssh_and_unknown_schemes_are_refused_with_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let ssh = resolve_with(&[("DOCKER_HOST", "ssh://me@build.lan")], home.path())
        .unwrap_err()
        .to_string();
    assert!(
        ssh.contains("ssh -nNT -L /tmp/docker.sock:/var/run/docker.sock me@build.lan"),
        "{ssh}"
    );
    let unverified = resolve_with(
        &[("DOCKER_HOST", "tcp://build.lan:2376"), ("DOCKER_TLS", "1")],
        home.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(unverified.contains("DOCKER_TLS_VERIFY=1"), "{unverified}");
    let pipe = resolve_with(
        &[("DOCKER_HOST", "npipe:////./pipe/docker_engine")],
        home.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(pipe.contains("unix:///path/to/docker.sock"), "{pipe}");
}

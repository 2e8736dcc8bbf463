use super::*;
use crate::config::{Build as ConfigBuild, Config, Purpose, RolloutKind};

fn guessed() -> Guess {
    let mut components = BTreeMap::new();
    components.insert(
        String::from("api"),
        Component {
            image: String::from("team/api"),
            build: Build::Cargo {
                package: String::from("api"),
                bin: String::from("api"),
            },
            rollout: Rollout {
                kind: String::from("Deployment"),
                namespace: String::from("team"),
                name: String::from("api"),
                container: String::from("main"),
            },
            found_in: String::from("manifests/api.yaml:1"),
        },
    );
    components.insert(
        String::from("operator"),
        Component {
            image: String::from("team/operator"),
            build: Build::Docker {
                context: String::from("crates/operator"),
                dockerfile: String::from("Dockerfile"),
                cargo: Some((String::from("operator"), String::from("operator"))),
            },
            rollout: Rollout {
                kind: String::from("WorkerPool"),
                namespace: String::from("team"),
                name: String::from("pool"),
                container: String::from("op"),
            },
            found_in: String::from("manifests/op.yaml:3"),
        },
    );
    Guess {
        name: String::from("team"),
        provider: String::from("sim"),
        manifests: vec![String::from("manifests")],
        components,
        check: vec![],
    }
}

#[test]
fn the_written_file_reads_back_as_the_guess() {
    let text = render(&guessed());
    let file = Path::new("/ws/dev-env.yaml");
    let config = Config::parse_for(file, &text, Purpose::Identity).expect(&text);
    assert_eq!(config.name, "team");
    assert_eq!(config.cluster.provider, Provider::Sim);
    assert_eq!(config.manifests, [PathBuf::from("/ws/manifests")]);
    let api = &config.components["api"];
    assert_eq!(api.image, "team/api");
    assert_eq!(
        api.build,
        ConfigBuild::Cargo(crate::config::CargoBinary {
            package: String::from("api"),
            bin: String::from("api"),
            profile: String::from("dev"),
            target: None,
        })
    );
    assert_eq!(
        (
            api.rollout.kind,
            api.rollout.namespace.as_str(),
            api.rollout.container.as_str()
        ),
        (RolloutKind::Deployment, "team", "main")
    );
    let ConfigBuild::Docker {
        context,
        dockerfile,
        cargo,
        ..
    } = &config.components["operator"].build
    else {
        panic!("a docker build:\n{text}");
    };
    assert_eq!(context, Path::new("/ws/crates/operator"));
    assert_eq!(dockerfile, Path::new("/ws/crates/operator/Dockerfile"));
    assert_eq!(cargo.as_ref().map(|c| c.bin.as_str()), Some("operator"));
    assert_eq!(
        config.components["operator"].rollout.kind,
        RolloutKind::WorkerPool
    );
}

#[test]
fn odd_names_are_quoted() {
    assert_eq!(scalar("demo/worker"), "demo/worker");
    assert_eq!(scalar("a: b"), "\"a: b\"");
    assert_eq!(scalar("-x"), "\"-x\"");
}

#[test]
fn the_name_is_the_directory_as_a_dns_label() {
    assert_eq!(
        environment_name(Path::new("/src/My_Team.repo")),
        "my-team-repo"
    );
    assert_eq!(environment_name(Path::new("/tmp/.tmpAb12")), "tmpab12");
    assert_eq!(environment_name(Path::new("/tmp/42")), "dev-42");
    assert!(crate::config::is_dns_label(&environment_name(Path::new(
        "/x/a-very-long-directory-name-that-goes-on-and-on-and-on"
    ))));
}

#[test]
fn an_existing_file_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev-env.yaml");
    std::fs::write(&file, "name: mine\n").unwrap();
    let err = init(dir.path(), &file).unwrap_err();
    assert!(matches!(err, Error::Exists { .. }), "{err}");
    assert!(err.to_string().contains("never overwrites"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "name: mine\n");
}

#[test]
fn a_workspace_is_guessed_from_its_packages_manifests_and_dockerfiles() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "Cargo.toml",
        "[workspace]\nresolver = \"3\"\nmembers = [\"api\", \"op\", \"lib\"]\n",
    );
    for (package, main) in [("api", true), ("op", true), ("lib", false)] {
        write(
            &format!("{package}/Cargo.toml"),
            &format!("[package]\nname = \"{package}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n"),
        );
        let file = if main { "src/main.rs" } else { "src/lib.rs" };
        write(&format!("{package}/{file}"), "fn main() {}\n");
    }
    write("op/Dockerfile", "FROM scratch\nCOPY op /op\n");
    write(
        "manifests/app.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\n\
         spec: {template: {spec: {containers: [{name: api, image: 'registry:5000/team/api:dev'}, {name: cache, image: redis:7}]}}}\n\
         ---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: op, namespace: ops}\n\
         spec: {template: {spec: {containers: [{name: manager, image: team/op}]}}}\n",
    );
    let guess = guess(root).unwrap();
    assert_eq!(guess.manifests, ["manifests"]);
    assert_eq!(guess.components.keys().collect::<Vec<_>>(), ["api", "op"]);
    let api = &guess.components["api"];
    assert_eq!(api.image, "team/api");
    assert_eq!(
        api.build,
        Build::Cargo {
            package: String::from("api"),
            bin: String::from("api")
        }
    );
    assert_eq!(api.rollout.namespace, "default");
    assert_eq!(
        guess.components["op"].build,
        Build::Docker {
            context: String::from("op"),
            dockerfile: String::from("Dockerfile"),
            cargo: Some((String::from("op"), String::from("op"))),
        }
    );
    let check = guess.check.join("\n");
    for expected in [
        "`redis` of Deployment/api",
        "declares no namespace",
        "op/Dockerfile copies",
    ] {
        assert!(
            check.contains(expected),
            "{expected} missing from:\n{check}"
        );
    }
}

//! Declared means declared: what the manifests no longer declare is pruned
//! from the environment's ApplySet, and nothing outside it, on the real
//! engine with a kube-sim node; kubectl's own ApplySet prune agrees on
//! the members.

use dev_env::lifecycle::{self, DryRunOptions, UpOptions};
use dev_env_tests::{SimProject, Stderr, UP, runtime, up};
use xshell::{Shell, cmd};

/// Three ConfigMaps in namespace `shop`: `keep` and `drop` in one file,
/// `gone` in another.
fn shop() -> SimProject {
    let env = SimProject::new("prune");
    env.write_sim_config();
    env.write(
        "manifests/00-namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
    );
    env.write(
        "manifests/10-both.yaml",
        &format!("{}---\n{}", map("keep"), map("drop")),
    );
    env.write("manifests/20-gone.yaml", &map("gone"));
    env
}

fn map(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: shop, labels: {{app: shop}}}}\ndata: {{k: v}}\n"
    )
}

fn kubectl(env: &SimProject, args: &[&str]) -> String {
    let sh = Shell::new().unwrap();
    let kc = env
        .dir
        .join(format!(".dev-env/{}/kubeconfig.host", env.name));
    cmd!(sh, "kubectl --kubeconfig {kc} {args...}")
        .read()
        .unwrap()
}

/// `kubectl apply --prune --applyset=<the environment's set> --dry-run=server`
/// of the manifests: what kubectl would apply and prune.
fn kubectl_prune(env: &SimProject) -> String {
    let parent = dev_env::apply::ApplySet::of_environment(&env.name).kubectl_ref();
    let sh = Shell::new().unwrap();
    let kc = env
        .dir
        .join(format!(".dev-env/{}/kubeconfig.host", env.name));
    let manifests = env.dir.join("manifests");
    cmd!(
        sh,
        "kubectl --kubeconfig {kc} apply --prune --applyset={parent} --dry-run=server -f {manifests}"
    )
    .env("KUBECTL_APPLYSET", "true")
    .read()
    .expect("kubectl apply --prune --applyset")
}

/// The ConfigMaps labelled `app=shop`, by name.
fn maps(env: &SimProject) -> Vec<String> {
    let out = kubectl(
        env,
        &[
            "-n",
            "shop",
            "get",
            "configmaps",
            "-l",
            "app=shop",
            "-o",
            "name",
        ],
    );
    let mut names: Vec<String> = out
        .lines()
        .map(|l| l.trim_start_matches("configmap/").to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn removed_manifests_are_pruned_and_objects_made_by_hand_stay() {
    let env = shop();
    let config = env.config();
    let first = up(&config).expect("dev up");
    assert!(first.pruned.is_empty(), "{:?}", first.pruned);
    assert_eq!(maps(&env), ["drop", "gone", "keep"]);
    // Made by hand, with the same labels: not a member.
    kubectl(
        &env,
        &[
            "-n",
            "shop",
            "create",
            "configmap",
            "by-hand",
            "--from-literal=k=v",
        ],
    );
    kubectl(
        &env,
        &["-n", "shop", "label", "configmap", "by-hand", "app=shop"],
    );

    // A removed file: its ConfigMap goes.
    std::fs::remove_file(env.dir.join("manifests/20-gone.yaml")).unwrap();
    let second = up(&config).expect("dev up after a file was removed");
    let pruned: Vec<String> = second.pruned.iter().map(ToString::to_string).collect();
    assert_eq!(pruned, ["ConfigMap/shop/gone"]);
    assert_eq!(
        second.pruned_summary(),
        "; pruned 1 object(s): ConfigMap/shop/gone"
    );
    assert_eq!(maps(&env), ["by-hand", "drop", "keep"]);

    // One document removed from a file of two: just that object goes.
    env.write("manifests/10-both.yaml", &map("keep"));
    let third = up(&config).expect("dev up after a document was removed");
    let pruned: Vec<String> = third.pruned.iter().map(ToString::to_string).collect();
    assert_eq!(pruned, ["ConfigMap/shop/drop"]);
    assert_eq!(maps(&env), ["by-hand", "keep"]);

    // `--no-prune` keeps what is no longer declared, for that run.
    env.write("manifests/10-both.yaml", "");
    let kept = runtime()
        .block_on(lifecycle::up(
            &config,
            UpOptions {
                prune: dev_env::apply::Prune::OFF,
                ..UP
            },
            &Stderr,
        ))
        .expect("dev up --no-prune");
    assert!(kept.pruned.is_empty(), "{:?}", kept.pruned);
    assert_eq!(maps(&env), ["by-hand", "keep"]);
}

#[test]
fn kubectl_applyset_prune_agrees_and_a_dry_run_changes_nothing() {
    let env = shop();
    let config = env.config();
    up(&config).expect("dev up");

    // kubectl reads the same set and finds nothing to prune.
    let out = kubectl_prune(&env);
    assert!(out.contains("configmap/keep"), "{out}");
    assert!(!out.contains("pruned"), "{out}");

    // With a manifest removed, the dry run names what would go and
    // changes nothing.
    std::fs::remove_file(env.dir.join("manifests/20-gone.yaml")).unwrap();
    let options = DryRunOptions {
        recreate: false,
        prune: dev_env::apply::Prune::DECLARED,
    };
    let dry = runtime()
        .block_on(lifecycle::dry_run(&config, options))
        .expect("dev up --dry-run");
    let text = dry.to_string();
    assert!(
        text.contains("ConfigMap/shop/gone: would be pruned\n"),
        "{text}"
    );
    assert!(text.contains("1 object(s) would be pruned\n"), "{text}");
    assert_eq!(maps(&env), ["drop", "gone", "keep"]);

    // kubectl agrees on that too.
    let out = kubectl_prune(&env);
    assert!(out.contains("configmap/gone pruned"), "{out}");
    assert_eq!(maps(&env), ["drop", "gone", "keep"]);
}

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

/// The environment's host kubeconfig.
fn kubeconfig(env: &SimProject) -> std::path::PathBuf {
    env.dir
        .join(format!(".dev-env/{}/kubeconfig.host", env.name))
}

fn kubectl(env: &SimProject, args: &[&str]) -> String {
    let sh = Shell::new().unwrap();
    let kc = kubeconfig(env);
    cmd!(sh, "kubectl --kubeconfig {kc} {args...}")
        .read()
        .unwrap()
}

/// `kubectl apply --prune --applyset=<the environment's set> --dry-run=server`
/// of the manifests: what kubectl would apply and prune.
fn kubectl_prune(env: &SimProject) -> String {
    let parent = dev_env::apply::ApplySet::of_environment(&env.name).kubectl_ref();
    let sh = Shell::new().unwrap();
    let kc = kubeconfig(env);
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
    assert!(
        first.pruning.deleted.is_empty(),
        "{:?}",
        first.pruning.deleted
    );
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
    let pruned: Vec<String> = second
        .pruning
        .deleted
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(pruned, ["ConfigMap/shop/gone"]);
    assert_eq!(
        second.pruned_summary(),
        "; pruned 1 object(s): ConfigMap/shop/gone"
    );
    assert_eq!(maps(&env), ["by-hand", "drop", "keep"]);

    // One document removed from a file of two: just that object goes.
    env.write("manifests/10-both.yaml", &map("keep"));
    let third = up(&config).expect("dev up after a document was removed");
    let pruned: Vec<String> = third
        .pruning
        .deleted
        .iter()
        .map(ToString::to_string)
        .collect();
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
    assert!(
        kept.pruning.deleted.is_empty(),
        "{:?}",
        kept.pruning.deleted
    );
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

/// A CRD of namespaced `Widget`s, whose fields are kept as written.
const WIDGET_CRD: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
    metadata: {name: widgets.prune.dev-env.io}\nspec:\n  group: prune.dev-env.io\n  scope: Namespaced\n  \
    names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}\n  versions:\n  \
    - name: v1\n    served: true\n    storage: true\n    \
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n";

fn widget(name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: prune.dev-env.io/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec: {{size: 1}}\n"
    )
}

/// Namespace `shop` with ConfigMap `settings` and a Widget `declared` in
/// it, and the Widget CRD: applied, then a Secret made by hand in `shop`
/// and a Widget made by hand in `default`, neither a member of the set.
fn shop_with_strangers() -> SimProject {
    let env = SimProject::new("prune");
    env.write_sim_config();
    env.write(
        "manifests/00-namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
    );
    env.write("manifests/10-crd.yaml", WIDGET_CRD);
    env.write(
        "manifests/20-objects.yaml",
        &format!("{}---\n{}", map("settings"), widget("declared", "shop")),
    );
    up(&env.config()).expect("dev up");
    kubectl(
        &env,
        &[
            "-n",
            "shop",
            "create",
            "secret",
            "generic",
            "precious",
            "--from-literal=k=v",
        ],
    );
    env.write("by-hand.yaml", &widget("by-hand", "default"));
    let by_hand = env.dir.join("by-hand.yaml");
    kubectl(&env, &["apply", "-f", &by_hand.display().to_string()]);
    env
}

/// Whether `kubectl get <what>` finds it.
fn exists(env: &SimProject, what: &[&str]) -> bool {
    let sh = Shell::new().unwrap();
    let kc = kubeconfig(env);
    cmd!(sh, "kubectl --kubeconfig {kc} get {what...} -o name")
        .quiet()
        .ignore_stderr()
        .read()
        .is_ok_and(|out| !out.trim().is_empty())
}

fn up_with(env: &SimProject, prune: dev_env::apply::Prune) -> lifecycle::UpReport {
    runtime()
        .block_on(lifecycle::up(
            &env.config(),
            UpOptions { prune, ..UP },
            &Stderr,
        ))
        .expect("dev up")
}

fn names(members: &[dev_env::apply::Member]) -> Vec<String> {
    members.iter().map(ToString::to_string).collect()
}

#[test]
fn manifests_that_declare_nothing_prune_nothing_until_confirmed_and_never_what_is_outside_the_set()
{
    use dev_env::apply::Prune;
    let env = shop_with_strangers();
    let config = env.config();

    // The manifests directory empties (a branch switch, a move): nothing
    // is pruned, and the run says how many members there are and how to
    // confirm.
    std::fs::remove_dir_all(env.dir.join("manifests")).unwrap();
    std::fs::create_dir(env.dir.join("manifests")).unwrap();
    let err = up(&config).expect_err("dev up of empty manifests");
    let text = dev_env::error_chain(&err);
    assert!(text.contains("declare no object"), "{text}");
    assert!(text.contains("has 4 member(s)"), "{text}");
    assert!(text.contains("--prune-all"), "{text}");
    for what in [
        &["namespace", "shop"][..],
        &["-n", "shop", "secret", "precious"],
        &["-n", "shop", "configmap", "settings"],
        &["crd", "widgets.prune.dev-env.io"],
        &["widget", "by-hand"],
    ] {
        assert!(exists(&env, what), "{what:?} is gone");
    }
    // The dry run says the same and changes nothing.
    let dry = runtime()
        .block_on(lifecycle::dry_run(&config, DryRunOptions::default()))
        .expect("dev up --dry-run")
        .to_string();
    assert!(
        dry.contains("would not prune: the manifests declare no object"),
        "{dry}"
    );

    // Confirmed: the members go, but the namespace that holds a Secret
    // made by hand, and the CRD of a Widget made by hand, are kept and
    // named with what they would take.
    let all = Prune {
        all: true,
        ..Prune::DECLARED
    };
    let report = up_with(&env, all);
    assert_eq!(
        names(&report.pruning.deleted),
        ["ConfigMap/shop/settings", "Widget/shop/declared"]
    );
    let held: Vec<(String, Vec<String>)> = report
        .pruning
        .held
        .iter()
        .map(|h| (h.member.to_string(), h.takes.clone()))
        .collect();
    assert_eq!(
        held,
        [
            (
                String::from("CustomResourceDefinition/widgets.prune.dev-env.io"),
                vec![String::from("Widget/default/by-hand")]
            ),
            (
                String::from("Namespace/shop"),
                vec![String::from("Secret/shop/precious")]
            ),
        ]
    );
    assert!(exists(&env, &["namespace", "shop"]));
    assert!(exists(&env, &["-n", "shop", "secret", "precious"]));
    assert!(exists(&env, &["crd", "widgets.prune.dev-env.io"]));
    assert!(exists(&env, &["widget", "by-hand"]));
    assert!(!exists(&env, &["-n", "shop", "configmap", "settings"]));

    // The kept ones stay members: the next run names them again, and
    // `--prune-destructive` prunes them with what they hold.
    let dry = runtime()
        .block_on(lifecycle::dry_run(
            &config,
            DryRunOptions {
                recreate: false,
                prune: all,
            },
        ))
        .expect("dev up --dry-run --prune-all")
        .to_string();
    assert!(
        dry.contains("Namespace/shop: would be kept: deleting it would delete 1 object(s) outside the set (Secret/shop/precious); --prune-destructive prunes it"),
        "{dry}"
    );
    let report = up_with(
        &env,
        Prune {
            destructive: true,
            ..all
        },
    );
    assert_eq!(
        names(&report.pruning.deleted),
        [
            "CustomResourceDefinition/widgets.prune.dev-env.io",
            "Namespace/shop"
        ]
    );
    assert!(report.pruning.held.is_empty(), "{:?}", report.pruning.held);
    assert!(!exists(&env, &["crd", "widgets.prune.dev-env.io"]));
}

#[test]
fn a_member_annotated_prune_disabled_leaves_the_set_and_stays() {
    let env = shop();
    env.write(
        "manifests/20-gone.yaml",
        &map("gone").replace(
            "labels: {app: shop}}",
            "labels: {app: shop}, annotations: {dev-env.io/prune: disabled}}",
        ),
    );
    up(&env.config()).expect("dev up");
    std::fs::remove_file(env.dir.join("manifests/20-gone.yaml")).unwrap();
    let report = up(&env.config()).expect("dev up after the annotated object was removed");
    assert!(
        report.pruning.deleted.is_empty(),
        "{:?}",
        report.pruning.deleted
    );
    assert_eq!(names(&report.pruning.released), ["ConfigMap/shop/gone"]);
    assert_eq!(maps(&env), ["drop", "gone", "keep"]);
    // Out of the set: kubectl's prune of the same set leaves it too, and
    // the next run has nothing to say about it.
    let labels = kubectl(
        &env,
        &[
            "-n",
            "shop",
            "get",
            "configmap",
            "gone",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert!(
        !labels.contains("applyset.kubernetes.io/part-of"),
        "{labels}"
    );
    assert!(!kubectl_prune(&env).contains("configmap/gone"));
    let again = up(&env.config()).expect("dev up once more");
    assert!(again.pruning.released.is_empty() && again.pruning.deleted.is_empty());
    assert_eq!(maps(&env), ["drop", "gone", "keep"]);
}

/// The resourceVersion of every object `kubectl get` lists of `kinds`, by
/// `kind/namespace/name`.
fn versions(env: &SimProject, kinds: &str) -> std::collections::BTreeMap<String, String> {
    let out = kubectl(env, &["get", kinds, "-A", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let meta = &item["metadata"];
            let key = format!(
                "{}/{}/{}",
                item["kind"].as_str().unwrap(),
                meta["namespace"].as_str().unwrap_or_default(),
                meta["name"].as_str().unwrap()
            );
            (key, meta["resourceVersion"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn a_mistyped_rollout_target_fails_up_and_push_before_any_build_apply_or_prune() {
    let env = SimProject::with_component("tgt");
    env.write(
        "manifests/extra.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra, namespace: app}\ndata: {k: v}\n",
    );
    let config = env.config();
    up(&config).expect("dev up");
    let pushed = dev_env::state::State::load(&config.state_dir())
        .unwrap()
        .images["app"]
        .clone();
    let kinds = "namespaces,configmaps,deployments,serviceaccounts,applysets.dev-env.io";
    let before = versions(&env, kinds);

    // A typo in the target; meanwhile the source changed (a build would
    // push a new digest), and a manifest went (an apply would prune it).
    let file = env.dir.join("dev-env.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("name: app, container", "name: ap, container"),
    )
    .unwrap();
    env.write(
        "app/src/main.rs",
        "fn main() {\n    std::thread::sleep(std::time::Duration::from_secs(86401));\n}\n",
    );
    std::fs::remove_file(env.dir.join("manifests/extra.yaml")).unwrap();
    let config = env.config();
    let want = "component `app` rolls out Deployment app/ap, which the manifests do not declare";

    let events = dev_env_tests::Recorder::default();
    let err = runtime()
        .block_on(lifecycle::up(&config, UP, &events))
        .expect_err("dev up with a mistyped target");
    let text = dev_env::error_chain(&err);
    assert!(text.contains(want), "{text}");
    assert!(
        text.contains("did you mean Deployment/app/app (manifests/app.yaml:5)?"),
        "{text}"
    );
    assert!(
        text.starts_with(&config.locate("components.app.rollout.name")),
        "{text}"
    );

    let dry = runtime()
        .block_on(lifecycle::dry_run(&config, DryRunOptions::default()))
        .expect("dev up --dry-run")
        .to_string();
    assert!(
        dry.contains("would stop before changing anything:\n") && dry.contains(want),
        "{dry}"
    );

    let flags = dev_env::deliver::PushFlags {
        rollout: true,
        timeout: std::time::Duration::from_secs(60),
        verbose: false,
        wait_for_termination: false,
    };
    let err = runtime()
        .block_on(dev_env::deliver::push(
            &config,
            &[String::from("app")],
            flags,
            &events,
        ))
        .expect_err("push-image with a mistyped target");
    assert!(dev_env::error_chain(&err).contains(want), "{err}");

    // Neither run built, pushed, applied or pruned anything.
    let said = events.lines.lock().unwrap().clone();
    assert!(said.is_empty(), "{said:?}");
    let state = dev_env::state::State::load(&config.state_dir()).unwrap();
    assert_eq!(state.images["app"].digest, pushed.digest);
    let registry = dev_env::image::distribution::Client::new(
        &dev_env::registry::host(&config, &state).unwrap(),
    );
    let tagged = runtime()
        .block_on(registry.get_manifest(&pushed.repository, dev_env::image::DEV_TAG))
        .unwrap()
        .expect("the pushed tag");
    assert_eq!(
        tagged.digest_header.as_deref(),
        Some(pushed.digest.as_str())
    );
    assert_eq!(versions(&env, kinds), before);
    assert!(exists(&env, &["-n", "app", "configmap", "extra"]));
}

//! On a cluster dev-env does not own (`provider: existing`), a component
//! may roll out a workload the manifests do not declare, when the cluster
//! has it; one it has not fails before anything is built or applied.

use dev_env::config::Config;
use dev_env_tests::{SimProject, runtime, up};

#[test]
fn on_an_existing_cluster_a_target_outside_the_manifests_must_be_in_the_cluster() {
    // A sim environment stands in for the team's cluster: it runs
    // Deployment app/app.
    let env = SimProject::with_component("ext");
    up(&env.config()).expect("dev up of the stand-in cluster");
    let kubeconfig = env
        .dir
        .join(format!(".dev-env/{}/kubeconfig.host", env.name));
    // Another environment on that cluster, whose manifests are a ConfigMap
    // only: the component's Deployment is the cluster's.
    env.write(
        "shared/manifests/settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: app}\ndata: {k: v}\n",
    );
    let write = |name: &str| {
        env.write(
            "shared/dev-env.yaml",
            &format!(
                "name: shared-{}\ncluster: {{provider: existing, context: {}}}\n\
                 registry: {{external: 'localhost:5000', clusterHost: 'registry:5000'}}\nmanifests: [manifests]\n\
                 components:\n  app:\n    image: app\n    build: {{cargo: {{package: app}}}}\n    \
                 rollout: {{kind: Deployment, namespace: app, name: {name}, container: app}}\n",
                env.name, env.name
            ),
        );
        Config::load(&env.dir.join("shared/dev-env.yaml")).expect("a valid config")
    };
    // The context's client, as `dev up` makes it from the user's
    // kubeconfig.
    let verify = |config: &Config| {
        let manifests = dev_env::manifest::load(&config.manifests).unwrap();
        let outside = dev_env::targets::check(config, &manifests)?;
        assert_eq!(outside.len(), 1, "left for the cluster to hold");
        runtime().block_on(async {
            let client = dev_env::kubeconfig::client(&kubeconfig, None)
                .await
                .expect("a client of the stand-in cluster");
            dev_env::targets::check_in_cluster(&client, config, outside).await
        })
    };
    verify(&write("app")).expect("the cluster has Deployment app/app");
    let err = verify(&write("ap")).expect_err("the cluster has no Deployment app/ap");
    let text = dev_env::error_chain(&err);
    assert!(
        text.contains(
            "component `app` rolls out Deployment app/ap, which the manifests do not declare and the cluster has no such object"
        ),
        "{text}"
    );
}

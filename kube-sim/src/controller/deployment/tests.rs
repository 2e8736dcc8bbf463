use serde_json::{Value, json};

use super::*;
use crate::store::{Endpoint, StoreConfig, WriteOptions};

fn store() -> Store {
    Store::new(StoreConfig { history: 10_000 })
}

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "a", "image": image}]}}}})
}

fn key(name: &str) -> Key {
    Key {
        namespace: "default".into(),
        name: name.into(),
    }
}

fn list(store: &Store, resource: &GroupResource) -> Vec<Value> {
    store
        .list(resource, Some("default"), &ListOptions::default())
        .unwrap()
        .items
}

fn replica_sets(store: &Store) -> Vec<Value> {
    let mut list = list(store, &GroupResource::replicasets());
    list.sort_by_key(revision_of);
    list
}

/// Pretends every pod of every ReplicaSet is up: status counts equal `spec.replicas`.
fn settle(store: &Store) {
    for mut rs in replica_sets(store) {
        let n = spec_replicas(&rs);
        rs["status"] = json!({"replicas": n, "readyReplicas": n, "availableReplicas": n,
            "fullyLabeledReplicas": n, "observedGeneration": rs["metadata"]["generation"]});
        store
            .update(
                Endpoint::Status,
                &GroupResource::replicasets(),
                Some("default"),
                rs,
                &WriteOptions::manager("test"),
            )
            .unwrap();
    }
}

fn get(store: &Store, name: &str) -> Value {
    store
        .get(&GroupResource::deployments(), Some("default"), name)
        .unwrap()
}

fn change_image(store: &Store, name: &str, image: &str) {
    let mut d = get(store, name);
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
    update_deployment(store, d);
}

fn create_deployment(store: &Store, d: Value) {
    store
        .create(
            &GroupResource::deployments(),
            Some("default"),
            d,
            &WriteOptions::manager("test"),
        )
        .unwrap();
}

fn update_deployment(store: &Store, d: Value) {
    store
        .update(
            Endpoint::Main,
            &GroupResource::deployments(),
            Some("default"),
            d,
            &WriteOptions::manager("test"),
        )
        .unwrap();
}

fn sync_until_quiet(store: &Store, name: &str) {
    for _ in 0..20 {
        let before = store.current_resource_version();
        sync(store, &key(name)).unwrap();
        settle(store);
        if store.current_resource_version() == before {
            return;
        }
    }
    panic!("the deployment did not settle");
}

#[test]
fn first_sync_creates_a_hashed_replica_set_with_annotations() {
    let store = store();
    create_deployment(&store, deployment("web", 3, "nginx:1"));
    sync(&store, &key("web")).unwrap();
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"][HASH_LABEL].as_str().unwrap();
    assert_eq!(meta::name_of(rs), format!("web-{hash}"));
    assert_eq!(rs["spec"]["selector"]["matchLabels"][HASH_LABEL], hash);
    assert_eq!(
        rs["spec"]["template"]["metadata"]["labels"][HASH_LABEL],
        hash
    );
    assert_eq!(rs["spec"]["replicas"], 3);
    assert_eq!(rs["metadata"]["annotations"][REVISION], "1");
    assert_eq!(rs["metadata"]["annotations"][DESIRED_REPLICAS], "3");
    assert_eq!(rs["metadata"]["annotations"][MAX_REPLICAS], "4");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    let d = get(&store, "web");
    assert_eq!(d["metadata"]["annotations"][REVISION], "1");
    assert_eq!(d["status"]["observedGeneration"], 1);
    let progressing = condition(&d, "Progressing").unwrap();
    assert_eq!(progressing["reason"], reason::NEW_RS_CREATED);
    assert_eq!(
        progressing["message"],
        format!("Created new replica set \"web-{hash}\"")
    );
    let available = condition(&d, "Available").unwrap();
    assert_eq!(available["status"], "False");
    assert_eq!(available["reason"], reason::MIN_UNAVAILABLE);
    let events = list(&store, &GroupResource::events());
    assert!(
        events.iter().any(|e| e["reason"] == "ScalingReplicaSet"
            && e["message"] == format!("Scaled up replica set web-{hash} from 0 to 3")
            && e["involvedObject"]["kind"] == "Deployment"),
        "{events:?}"
    );
}

#[test]
fn a_rollout_of_four_replicas_surges_one_and_drops_one_at_once() {
    let store = store();
    create_deployment(&store, deployment("web", 4, "nginx:1"));
    sync_until_quiet(&store, "web");
    let d = get(&store, "web");
    assert_eq!(
        condition(&d, "Progressing").unwrap()["reason"],
        reason::NEW_RS_AVAILABLE
    );
    change_image(&store, "web", "nginx:2");
    sync(&store, &key("web")).unwrap();
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 2);
    assert_eq!(spec_replicas(&rss[0]), 3, "old replica set");
    assert_eq!(spec_replicas(&rss[1]), 1, "new replica set");
    assert_eq!(rss[1]["metadata"]["annotations"][REVISION], "2");
    let d = get(&store, "web");
    assert_eq!(d["metadata"]["annotations"][REVISION], "2");
    // Availability holds during the rollout; progress is not complete.
    assert_eq!(condition(&d, "Available").unwrap()["status"], "True");
    assert_ne!(
        condition(&d, "Progressing").unwrap()["reason"],
        reason::NEW_RS_AVAILABLE
    );
    sync_until_quiet(&store, "web");
    let rss = replica_sets(&store);
    assert_eq!(spec_replicas(&rss[0]), 0);
    assert_eq!(spec_replicas(&rss[1]), 4);
    let d = get(&store, "web");
    let progressing = condition(&d, "Progressing").unwrap();
    assert_eq!(progressing["reason"], reason::NEW_RS_AVAILABLE);
    assert_eq!(
        progressing["message"],
        format!(
            "ReplicaSet \"{}\" has successfully progressed.",
            meta::name_of(&rss[1])
        )
    );
    assert_eq!(d["status"]["updatedReplicas"], 4);
    assert_eq!(d["status"]["replicas"], 4);
}

#[test]
fn a_single_replica_rolls_new_up_before_old_down() {
    let store = store();
    create_deployment(&store, deployment("one", 1, "nginx:1"));
    sync_until_quiet(&store, "one");
    change_image(&store, "one", "nginx:2");
    sync(&store, &key("one")).unwrap();
    let rss = replica_sets(&store);
    assert_eq!(
        (spec_replicas(&rss[0]), spec_replicas(&rss[1])),
        (1, 1),
        "the old pod stays until the new one is available"
    );
    // Without availability of the new replica, another sync changes nothing.
    sync(&store, &key("one")).unwrap();
    let rss = replica_sets(&store);
    assert_eq!((spec_replicas(&rss[0]), spec_replicas(&rss[1])), (1, 1));
    settle(&store);
    sync(&store, &key("one")).unwrap();
    let rss = replica_sets(&store);
    assert_eq!((spec_replicas(&rss[0]), spec_replicas(&rss[1])), (0, 1));
}

#[test]
fn reverting_the_template_reuses_the_old_replica_set_with_a_new_revision() {
    let store = store();
    create_deployment(&store, deployment("web", 2, "nginx:1"));
    sync_until_quiet(&store, "web");
    change_image(&store, "web", "nginx:2");
    sync_until_quiet(&store, "web");
    change_image(&store, "web", "nginx:1");
    sync_until_quiet(&store, "web");
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 2);
    let first = rss
        .iter()
        .find(|rs| rs["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1")
        .unwrap();
    assert_eq!(first["metadata"]["annotations"][REVISION], "3");
    assert_eq!(first["metadata"]["annotations"][REVISION_HISTORY], "1");
    assert_eq!(spec_replicas(first), 2);
    assert_eq!(get(&store, "web")["metadata"]["annotations"][REVISION], "3");
}

#[test]
fn old_replica_sets_beyond_the_history_limit_are_deleted() {
    let store = store();
    let mut d = deployment("web", 1, "nginx:0");
    d["spec"]["revisionHistoryLimit"] = json!(1);
    create_deployment(&store, d);
    sync_until_quiet(&store, "web");
    for v in 1..4 {
        change_image(&store, "web", &format!("nginx:{v}"));
        sync_until_quiet(&store, "web");
    }
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 2, "the new one and one old one remain");
    assert_eq!(rss[1]["metadata"]["annotations"][REVISION], "4");
}

#[test]
fn scaling_is_not_a_rollout() {
    let store = store();
    create_deployment(&store, deployment("web", 2, "nginx:1"));
    sync_until_quiet(&store, "web");
    let mut d = get(&store, "web");
    d["spec"]["replicas"] = json!(5);
    update_deployment(&store, d);
    sync(&store, &key("web")).unwrap();
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 1);
    assert_eq!(spec_replicas(&rss[0]), 5);
    assert_eq!(rss[0]["metadata"]["annotations"][DESIRED_REPLICAS], "5");
}

#[test]
fn recreate_scales_old_to_zero_before_creating_the_new_replica_set() {
    let store = store();
    let mut d = deployment("db", 2, "postgres:1");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    create_deployment(&store, d);
    sync_until_quiet(&store, "db");
    change_image(&store, "db", "postgres:2");
    sync(&store, &key("db")).unwrap();
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 1, "no new replica set while old replicas exist");
    assert_eq!(spec_replicas(&rss[0]), 0);
    sync_until_quiet(&store, "db");
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 2);
    assert_eq!(spec_replicas(&rss[1]), 2);
}

#[test]
fn fenceposts_round_surge_up_and_unavailable_down() {
    let mut d = deployment("web", 10, "x");
    assert_eq!(resolve_fenceposts(&d), (3, 2));
    d["spec"]["replicas"] = json!(1);
    assert_eq!(resolve_fenceposts(&d), (1, 0));
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}});
    assert_eq!(resolve_fenceposts(&d), (0, 1));
    assert_eq!(max_unavailable(&d), 1);
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    assert_eq!((max_surge(&d), max_unavailable(&d)), (0, 0));
}

#[test]
fn templates_compare_without_the_hash_label() {
    let a = json!({"metadata": {"labels": {"app": "x", HASH_LABEL: "abc"}}, "spec": {"containers": [{"name": "a"}], "volumes": []}});
    let b = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "a"}]}});
    assert!(equal_ignore_hash(&a, &b));
    let c = json!({"metadata": {"labels": {"app": "x"}, "annotations": {"kubectl.kubernetes.io/restartedAt": "t"}}, "spec": {"containers": [{"name": "a"}]}});
    assert!(!equal_ignore_hash(&a, &c));
}

#[test]
fn a_paused_deployment_only_scales_and_resumes_the_rollout_later() {
    let store = store();
    create_deployment(&store, deployment("web", 2, "nginx:1"));
    sync_until_quiet(&store, "web");
    let mut d = get(&store, "web");
    d["spec"]["paused"] = json!(true);
    d["spec"]["replicas"] = json!(3);
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    update_deployment(&store, d);
    sync_until_quiet(&store, "web");
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 1, "no rollout while paused");
    assert_eq!(spec_replicas(&rss[0]), 3, "but scaling happens");
    let d = get(&store, "web");
    let progressing = condition(&d, "Progressing").unwrap();
    assert_eq!(
        (
            progressing["status"].as_str(),
            progressing["reason"].as_str()
        ),
        (Some("Unknown"), Some(reason::PAUSED))
    );

    let mut d = get(&store, "web");
    d["spec"]["paused"] = json!(false);
    update_deployment(&store, d);
    sync_until_quiet(&store, "web");
    let rss = replica_sets(&store);
    assert_eq!(rss.len(), 2);
    assert_eq!((spec_replicas(&rss[0]), spec_replicas(&rss[1])), (0, 3));
    let d = get(&store, "web");
    assert_eq!(
        condition(&d, "Progressing").unwrap()["reason"],
        reason::NEW_RS_AVAILABLE
    );
}

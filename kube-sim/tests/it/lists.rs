//! Lists and watches as the API server serves them: continued lists are snapshots, `resourceVersionMatch`,
//! the bounded watch history, bookmarks before a watch's timeout, and HTTP/2.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams, VersionMatch};
use serde_json::{Value, json};

use crate::{get, json, start, start_with};

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"set": "t"}}, "data": {"k": name}}),
    )
    .unwrap()
}

async fn create(api: &Api<ConfigMap>, names: &[&str]) {
    for name in names {
        api.create(&PostParams::default(), &config_map(name))
            .await
            .unwrap();
    }
}

fn names(list: &kube::core::ObjectList<ConfigMap>) -> Vec<String> {
    list.items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// A continued list is a snapshot at the first page's version: objects created after it are absent,
/// objects deleted after it are still there, and every page carries the same version.
#[tokio::test]
async fn a_continued_list_is_a_snapshot_at_the_first_page() {
    let sim = start().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    create(&api, &["a", "b", "c", "d", "e"]).await;
    let mine = ListParams::default().labels("set=t");

    let first = api.list(&mine.clone().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    let token = first.metadata.continue_.clone().expect("a continue token");
    let version = first.metadata.resource_version.clone().unwrap();

    api.delete("d", &DeleteParams::default()).await.unwrap();
    create(&api, &["bb", "f"]).await;
    let mut c = api.get("c").await.unwrap();
    c.data = Some([("k".to_string(), "changed".to_string())].into());
    api.replace("c", &PostParams::default(), &c).await.unwrap();

    let mut seen = names(&first);
    let mut token = Some(token);
    while let Some(t) = token {
        let page = api
            .list(&mine.clone().limit(2).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some(&*version));
        for cm in &page.items {
            if cm.metadata.name.as_deref() == Some("c") {
                assert_eq!(cm.data.as_ref().unwrap()["k"], "c", "c as it was");
            }
        }
        seen.extend(names(&page));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);

    let fresh = api.list(&mine).await.unwrap();
    assert_eq!(names(&fresh), ["a", "b", "bb", "c", "e", "f"]);
}

/// A continue token older than the history is 410 `Expired` with a token in the Status that lists the
/// rest at the latest version.
#[tokio::test]
async fn an_expired_continue_token_gets_410_with_a_fresh_token() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create(&api, &["a", "b", "c"]).await;
    let first = api.list(&ListParams::default().limit(1)).await.unwrap();
    let token = first.metadata.continue_.unwrap();
    create(&api, &["d"]).await;
    sim.store().compact();

    let base = "/api/v1/namespaces/default/configmaps?limit=1";
    let (code, body) = get(&client, &format!("{base}&continue={token}")).await;
    assert_eq!(code, 410, "{body}");
    let status = json(&body);
    assert_eq!(status["reason"], "Expired");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old"),
        "{status}"
    );
    let fresh = status["metadata"]["continue"].as_str().expect("a token");

    let (code, body) = get(
        &client,
        &format!("/api/v1/namespaces/default/configmaps?continue={fresh}"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let rest = json(&body);
    let rest_names: Vec<&str> = rest["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(
        rest_names.contains(&"d"),
        "the rest at the latest version: {rest_names:?}"
    );
    assert!(!rest_names.contains(&"a"), "{rest_names:?}");
    assert_eq!(
        rest["metadata"]["resourceVersion"],
        sim.store().current_resource_version().to_string()
    );
}

/// `resourceVersionMatch=Exact` lists the state at that version, and is 410 once the history is gone.
#[tokio::test]
async fn exact_lists_read_the_past_until_it_is_compacted() {
    let sim = start().await;
    let api: Api<ConfigMap> = Api::namespaced(sim.client().await.unwrap(), "default");
    create(&api, &["a", "b"]).await;
    let then = crate::list_version(&api).await;
    api.delete("a", &DeleteParams::default()).await.unwrap();
    create(&api, &["c"]).await;

    let exact = ListParams::default()
        .labels("set=t")
        .at(&then)
        .matching(VersionMatch::Exact);
    let past = api.list(&exact).await.unwrap();
    assert_eq!(names(&past), ["a", "b"]);
    assert_eq!(past.metadata.resource_version.as_deref(), Some(&*then));

    sim.store().compact();
    match api.list(&exact).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

/// `NotOlderThan` a version the store has not reached waits, then answers 504 as kube-apiserver does;
/// a match without a version is refused.
#[tokio::test]
async fn a_future_version_is_504_and_a_match_without_a_version_is_refused() {
    let sim = start().await;
    let client = sim.client().await.unwrap();
    let current = sim.store().current_resource_version();
    let future = current + 1000;
    let started = Instant::now();
    // curl, as kube-rs retries a 504 by itself.
    let (code, body) = curl(
        &sim,
        &["--http2"],
        &format!("/api/v1/namespaces/default/configmaps?resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    let code: u16 = code.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it waited first"
    );
    assert_eq!(code, 504, "{body}");
    let status = json(&body);
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("Too large resource version: {future}, current: ")),
        "{message}"
    );

    let (code, body) = get(
        &client,
        "/api/v1/namespaces/default/configmaps?resourceVersionMatch=NotOlderThan",
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let status = json(&body);
    assert_eq!(status["reason"], "Invalid");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("resourceVersionMatch is forbidden unless resourceVersion is provided"),
        "{status}"
    );

    // A version reached while the list waits is served.
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let next = sim.store().current_resource_version() + 1;
    let waiting = tokio::spawn({
        let api = api.clone();
        async move {
            let at = next.to_string();
            api.list(
                &ListParams::default()
                    .at(&at)
                    .matching(VersionMatch::NotOlderThan),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    create(&api, &["late"]).await;
    let list = waiting
        .await
        .unwrap()
        .expect("served once the store got there");
    assert!(names(&list).contains(&"late".to_string()));
}

/// Events older than the history window are gone: a watch from before them gets 410.
#[tokio::test]
async fn the_watch_history_forgets_events_past_its_window() {
    let mut config = kube_sim::Config::ephemeral();
    config.watch_history_window = Duration::from_millis(500);
    let sim = start_with(config).await;
    let client = sim.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let before = sim.store().current_resource_version();
    create(&api, &["a"]).await;
    let uri = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&resourceVersion={before}"
    );
    let (_, body) = get(&client, &uri).await;
    assert!(body.contains("\"ADDED\""), "still in the window: {body}");

    tokio::time::sleep(Duration::from_millis(800)).await;
    sim.store().expire_history();
    let (code, body) = get(&client, &uri).await;
    assert_eq!(code, 200);
    let event = json(body.lines().next().expect("one event"));
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
}

/// A watch that allows bookmarks gets one shortly before its timeout, even when the interval is longer.
#[tokio::test]
async fn a_bookmark_arrives_just_before_the_timeout() {
    let mut config = kube_sim::Config::ephemeral();
    config.bookmark_interval = Duration::from_secs(60);
    let sim = start_with(config).await;
    let client = sim.client().await.unwrap();
    let rv = sim.store().current_resource_version();
    let uri = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion={rv}"
    );
    let started = Instant::now();
    let (code, body) = get(&client, &uri).await;
    assert_eq!(code, 200);
    assert!(started.elapsed() >= Duration::from_secs(4));
    let events: Vec<Value> = body.lines().map(json).collect();
    assert_eq!(events.len(), 1, "{body}");
    assert_eq!(events[0]["type"], "BOOKMARK");
    let object = events[0]["object"].as_object().unwrap();
    let mut keys: Vec<&String> = object.keys().collect();
    keys.sort();
    assert_eq!(keys, ["apiVersion", "kind", "metadata"]);
    let metadata = events[0]["object"]["metadata"].as_object().unwrap();
    assert_eq!(metadata.keys().collect::<Vec<_>>(), ["resourceVersion"]);
    let at: u64 = metadata["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(at >= rv, "{at} < {rv}");
}

/// curl negotiates HTTP/2 over TLS (ALPN `h2`) and lists; HTTP/1.1 is still offered.
#[tokio::test]
async fn http2_is_negotiated_over_tls_and_http11_still_served() {
    let sim = start().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let (version, body) = curl(&sim, &["--http2"], path).await;
    assert_eq!(version, "2 200");
    assert_eq!(json(&body)["kind"], "ConfigMapList");
    assert_eq!(curl(&sim, &["--http1.1"], path).await.0, "1.1 200");
}

/// A `GET` of `path` by curl with `flags`: `"<HTTP version> <status>"` and the body.
async fn curl(sim: &kube_sim::Sim, flags: &[&str], path: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (ca, body) = (dir.path().join("ca.pem"), dir.path().join("body"));
    std::fs::write(&ca, sim.ca_pem().unwrap()).unwrap();
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "--cacert"])
        .arg(&ca)
        .args(flags)
        .args(["-H", &format!("Authorization: Bearer {}", sim.token())])
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_version} %{http_code}"])
        .arg(format!("{}{path}", sim.url()));
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("curl runs"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&body).unwrap_or_default();
    (String::from_utf8_lossy(&out.stdout).into_owned(), text)
}

/// Events live for their time to live after their last write, then go with a `DELETED` watch event.
#[tokio::test]
async fn events_expire_after_their_time_to_live() {
    use k8s_openapi::api::core::v1::Event;
    let mut config = kube_sim::Config::ephemeral();
    config.event_ttl = Duration::from_secs(1);
    let sim = start_with(config).await;
    let client = sim.client().await.unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Tested", "message": "m", "type": "Normal",
        "lastTimestamp": kube_sim_now(),
    }))
    .unwrap();
    events.create(&PostParams::default(), &event).await.unwrap();
    let from = crate::list_version(&events).await;
    sim.store().expire_history();
    assert!(
        events.get_opt("e").await.unwrap().is_some(),
        "alive within its TTL"
    );

    tokio::time::sleep(Duration::from_millis(2100)).await;
    sim.store().expire_history();
    assert!(
        events.get_opt("e").await.unwrap().is_none(),
        "gone after it"
    );
    let uri = format!(
        "/api/v1/namespaces/default/events?watch=true&timeoutSeconds=1&resourceVersion={from}"
    );
    let (_, body) = get(&client, &uri).await;
    let first = json(body.lines().next().expect("an event"));
    assert_eq!(first["type"], "DELETED");
    assert_eq!(first["object"]["metadata"]["name"], "e");
}

fn kube_sim_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

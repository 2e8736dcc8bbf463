//! Objects encoded with k8s-pb's messages decode to the JSON a JSON client sends.

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::json;

use super::{Error, MAGIC, decode, schema::Schema};

/// The body a Kubernetes client sends for `message` of `kind`.
fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [MAGIC, &unknown.encode_to_vec()].concat()
}

fn metadata(name: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: Some(name.into()),
        // Go's encoder writes fields that are not pointers even when empty.
        namespace: Some(String::new()),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        labels: [("app".to_string(), "web".to_string())].into(),
        ..Default::default()
    })
}

#[test]
fn a_deployment_decodes_to_kubernetes_json() {
    let container = core::Container {
        name: Some("nginx".into()),
        image: Some("nginx".into()),
        ports: vec![core::ContainerPort {
            container_port: Some(80),
            ..Default::default()
        }],
        resources: Some(core::ResourceRequirements {
            limits: [(
                "cpu".to_string(),
                Quantity {
                    string: Some("500m".into()),
                },
            )]
            .into(),
            ..Default::default()
        }),
        stdin: Some(false),
        ..Default::default()
    };
    let deployment = apps::Deployment {
        metadata: metadata("web"),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: [("app".to_string(), "web".to_string())].into(),
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: metadata("").map(|m| meta::ObjectMeta { name: None, ..m }),
                spec: Some(core::PodSpec {
                    containers: vec![container],
                    host_ipc: Some(true),
                    ..Default::default()
                }),
            }),
            min_ready_seconds: Some(0),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus::default()),
    };
    let got = decode(&envelope("apps/v1", "Deployment", &deployment)).expect("it decodes");
    let labels = json!({"labels": {"app": "web"}});
    assert_eq!(
        got,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": labels, "spec": {"hostIPC": true, "containers": [{
                    "name": "nginx", "image": "nginx", "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "500m"}},
                }]}},
            },
            "status": {},
        })
    );
}

#[test]
fn services_secrets_and_times_take_their_json_forms() {
    let service = core::Service {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            creation_timestamp: Some(meta::Time {
                seconds: Some(1_700_000_000),
                nanos: Some(0),
            }),
            ..Default::default()
        }),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                port: Some(80),
                target_port: Some(IntOrString {
                    r#type: Some(1),
                    int_val: Some(0),
                    str_val: Some("http".into()),
                }),
                ..Default::default()
            }],
            cluster_ips: vec!["10.0.0.1".into()],
            ..Default::default()
        }),
        status: None,
    };
    let got = decode(&envelope("v1", "Service", &service)).expect("it decodes");
    assert_eq!(got["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
    assert_eq!(
        got["spec"]["ports"],
        json!([{"port": 80, "targetPort": "http"}])
    );
    assert_eq!(got["spec"]["clusterIPs"], json!(["10.0.0.1"]));

    let secret = core::Secret {
        metadata: metadata("s"),
        data: [
            ("a".to_string(), b"b".to_vec()),
            ("e".to_string(), Vec::new()),
        ]
        .into(),
        r#type: Some("Opaque".into()),
        ..Default::default()
    };
    let got = decode(&envelope("v1", "Secret", &secret)).expect("it decodes");
    assert_eq!(got["data"], json!({"a": "Yg==", "e": ""}));
    assert_eq!(got["type"], "Opaque");
}

#[test]
fn an_event_keeps_int64_counts_and_micro_times() {
    let event = core::Event {
        metadata: metadata("e"),
        count: Some(3),
        event_time: Some(meta::MicroTime {
            seconds: Some(1_700_000_000),
            nanos: Some(123_456_789),
        }),
        ..Default::default()
    };
    let got = decode(&envelope("v1", "Event", &event)).expect("it decodes");
    assert_eq!(got["count"], 3);
    assert_eq!(got["eventTime"], "2023-11-14T22:13:20.123456Z");
}

#[test]
fn bodies_that_are_not_served_protobuf_are_refused() {
    assert!(matches!(decode(b"{}"), Err(Error::NoMagic)));
    let unknown = envelope("v1", "Widget", &core::ConfigMap::default());
    assert!(matches!(decode(&unknown), Err(Error::UnknownKind { .. })));
    let truncated = envelope("v1", "ConfigMap", &core::ConfigMap::default());
    let mut cut = truncated.clone();
    cut.extend_from_slice(&[0x0a, 0x05, b'x']);
    assert!(decode(&cut).is_err(), "a cut envelope does not decode");
}

#[test]
fn every_built_in_kind_has_a_schema() {
    let schema = Schema::get();
    let kinds: Vec<_> = schema.kinds().collect();
    for info in crate::resource::built_ins() {
        let api_version = info.api_version(&info.versions[0]);
        assert!(
            kinds.contains(&(api_version.as_str(), info.kind.as_str())),
            "{api_version} {} has a schema",
            info.kind
        );
    }
}

#[test]
fn go_durations_read_as_go_writes_them() {
    let cases = [
        (0, "0s"),
        (1_500, "1.5µs"),
        (2_000_000, "2ms"),
        (90_000_000_000, "1m30s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-1_000_000_000, "-1s"),
    ];
    for (nanos, text) in cases {
        assert_eq!(super::special::go_duration(nanos), text);
    }
}

#[test]
fn bodies_are_read_by_their_media_type() {
    use super::object_body;
    let json = br#"{"kind":"ConfigMap"}"#;
    for content_type in [None, Some(""), Some("application/json; charset=utf-8")] {
        let v = object_body(content_type, json).expect("a JSON body");
        assert_eq!(v["kind"], "ConfigMap", "{content_type:?}");
    }
    let yaml = object_body(Some("application/yaml"), b"kind: ConfigMap\n").expect("YAML");
    assert_eq!(yaml["kind"], "ConfigMap");
    let pb = envelope("v1", "ConfigMap", &core::ConfigMap::default());
    let v = object_body(Some("application/vnd.kubernetes.protobuf"), &pb).expect("protobuf");
    assert_eq!(v, json!({"apiVersion": "v1", "kind": "ConfigMap"}));
    for unserved in ["application/cbor", "text/plain", "application/x-unknown"] {
        let e = object_body(Some(unserved), json).expect_err("unserved");
        assert_eq!(
            (e.code(), e.reason()),
            (415, "UnsupportedMediaType"),
            "{unserved}"
        );
    }
}

#[test]
fn responses_are_json_for_any_accept_that_allows_it() {
    use super::check_accept;
    let kubectl = "application/vnd.kubernetes.protobuf,application/json";
    for accept in [
        "",
        "*/*",
        kubectl,
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    ] {
        assert!(check_accept(accept, false).is_ok(), "{accept}");
    }
    let e = check_accept("application/vnd.kubernetes.protobuf", false).expect_err("protobuf only");
    assert_eq!((e.code(), e.reason()), (406, "NotAcceptable"));
    assert!(check_accept("text/plain", true).is_ok(), "logs are text");
    assert!(
        check_accept("text/plain", false).is_err(),
        "objects are not"
    );
}

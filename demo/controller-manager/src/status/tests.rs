use k8s_openapi::{
    api::apps::v1::{DeploymentCondition, DeploymentSpec, DeploymentStatus},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::*;

/// Replica counts of a Deployment status, in the order kubectl prints them.
#[derive(Clone, Copy)]
struct Counts {
    replicas: i32,
    updated: i32,
    available: i32,
}

fn deployment(
    spec_replicas: i32,
    generation: i64,
    observed: Option<i64>,
    counts: Counts,
    conditions: &[(&str, &str, &str)],
) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some("default".to_string()),
            generation: Some(generation),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            replicas: Some(spec_replicas),
            ..DeploymentSpec::default()
        },
        status: Some(DeploymentStatus {
            observed_generation: observed,
            replicas: Some(counts.replicas),
            updated_replicas: Some(counts.updated),
            ready_replicas: Some(counts.available),
            available_replicas: Some(counts.available),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(type_, status, reason)| DeploymentCondition {
                        type_: Some(type_.to_string()),
                        status: Some(status.to_string()),
                        reason: Some(reason.to_string()),
                        message: Some(format!("{type_} is {status}")),
                        ..DeploymentCondition::default()
                    })
                    .collect(),
            ),
            ..DeploymentStatus::default()
        }),
    }
}

fn counts(replicas: i32, updated: i32, available: i32) -> Counts {
    Counts {
        replicas,
        updated,
        available,
    }
}

/// A Deployment condition: type, status, reason.
type DeploymentConditionRow = (&'static str, &'static str, &'static str);
/// spec.replicas, generation, observedGeneration, counts, conditions, expected.
type RolloutRow = (
    i32,
    i64,
    Option<i64>,
    Counts,
    &'static [DeploymentConditionRow],
    &'static str,
);

const AVAILABLE_TRUE: (&str, &str, &str) = ("Available", "True", "MinimumReplicasAvailable");
const DEADLINE: (&str, &str, &str) = ("Progressing", "False", "ProgressDeadlineExceeded");

fn time(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
}

#[test]
fn rollout_follows_kubectls_rule() {
    let table: &[RolloutRow] = &[
        (
            2,
            1,
            None,
            counts(0, 0, 0),
            &[],
            "Waiting for deployment \"default\" spec update to be observed (generation 1, observed 0)",
        ),
        (
            2,
            3,
            Some(2),
            counts(2, 2, 2),
            &[AVAILABLE_TRUE],
            "Waiting for deployment \"default\" spec update to be observed (generation 3, observed 2)",
        ),
        (
            2,
            3,
            Some(3),
            counts(3, 1, 2),
            &[AVAILABLE_TRUE],
            "Waiting for deployment \"default\" rollout to finish: 1 out of 2 new replicas have been updated",
        ),
        (
            2,
            3,
            Some(3),
            counts(3, 2, 2),
            &[AVAILABLE_TRUE],
            "Waiting for deployment \"default\" rollout to finish: 1 old replicas are pending termination",
        ),
        (
            2,
            3,
            Some(3),
            counts(2, 2, 1),
            &[AVAILABLE_TRUE],
            "Waiting for deployment \"default\" rollout to finish: 1 of 2 updated replicas are available",
        ),
        (
            2,
            3,
            Some(3),
            counts(2, 2, 2),
            &[AVAILABLE_TRUE],
            "complete",
        ),
        (
            2,
            3,
            Some(4),
            counts(2, 2, 2),
            &[AVAILABLE_TRUE],
            "complete",
        ),
        (0, 1, Some(1), counts(0, 0, 0), &[], "complete"),
        (
            2,
            3,
            Some(3),
            counts(3, 1, 2),
            &[AVAILABLE_TRUE, DEADLINE],
            "deadline",
        ),
    ];
    for (i, (spec, generation, observed, counts, conditions, expected)) in table.iter().enumerate()
    {
        let got = rollout(&deployment(
            *spec,
            *generation,
            *observed,
            *counts,
            conditions,
        ));
        match (*expected, &got) {
            ("complete", Rollout::Complete { message }) => {
                assert_eq!(message, "deployment \"default\" successfully rolled out")
            }
            ("deadline", Rollout::DeadlineExceeded { message }) => {
                assert_eq!(
                    message,
                    "deployment \"default\" exceeded its progress deadline"
                )
            }
            (expected, Rollout::Waiting { message }) => assert_eq!(message, expected, "row {i}"),
            (expected, got) => panic!("row {i}: expected {expected}, got {got:?}"),
        }
    }
}

#[test]
fn conditions_follow_the_deployment() {
    // (counts, deployment conditions, Available, Progressing, Progressing reason)
    let table: &[(Counts, &[_], &str, &str, &str)] = &[
        (
            counts(2, 2, 2),
            &[AVAILABLE_TRUE],
            "True",
            "False",
            "RolloutComplete",
        ),
        (
            counts(3, 2, 2),
            &[AVAILABLE_TRUE],
            "True",
            "True",
            "RollingOut",
        ),
        (
            counts(2, 2, 0),
            &[("Available", "False", "MinimumReplicasUnavailable")],
            "False",
            "True",
            "RollingOut",
        ),
        (counts(2, 2, 2), &[], "Unknown", "False", "RolloutComplete"),
        (
            counts(3, 1, 2),
            &[AVAILABLE_TRUE, DEADLINE],
            "True",
            "True",
            "ProgressDeadlineExceeded",
        ),
    ];
    for (i, (counts, conditions, available, progressing, reason)) in table.iter().enumerate() {
        let status = derive(
            Some(7),
            &deployment(2, 4, Some(4), *counts, conditions),
            None,
            &time(100),
        );
        let a = status.condition(AVAILABLE).unwrap();
        let p = status.condition(PROGRESSING).unwrap();
        assert_eq!(
            (a.status.as_str(), p.status.as_str(), p.reason.as_str()),
            (*available, *progressing, *reason),
            "row {i}"
        );
        assert_eq!(a.observed_generation, Some(7));
        assert_eq!(p.observed_generation, Some(7));
    }
}

#[test]
fn the_status_records_the_generation_and_counts() {
    let status = derive(
        Some(5),
        &deployment(2, 1, Some(1), counts(3, 2, 1), &[AVAILABLE_TRUE]),
        None,
        &time(100),
    );
    assert_eq!(status.observed_generation, Some(5));
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.ready_replicas,
            status.available_replicas
        ),
        (3, 2, 1, 1)
    );
    let available = status.condition(AVAILABLE).unwrap();
    assert_eq!(available.reason, "MinimumReplicasAvailable");
    assert_eq!(available.message, "Available is True");
}

#[test]
fn transition_times_move_only_when_a_condition_changes() {
    let rolling = deployment(2, 1, Some(1), counts(3, 1, 2), &[AVAILABLE_TRUE]);
    let done = deployment(2, 1, Some(1), counts(2, 2, 2), &[AVAILABLE_TRUE]);
    let first = derive(Some(1), &rolling, None, &time(100));
    let second = derive(Some(1), &done, Some(&first), &time(200));
    assert_eq!(
        second.condition(AVAILABLE).unwrap().last_transition_time,
        time(100)
    );
    assert_eq!(
        second.condition(PROGRESSING).unwrap().last_transition_time,
        time(200)
    );
    // Nothing changed: the status is identical, so no write is needed.
    let third = derive(Some(1), &done, Some(&second), &time(300));
    assert_eq!(third, second);
}

#[test]
fn the_status_serializes_as_the_crd_declares_it() {
    let status = derive(
        Some(2),
        &deployment(1, 1, Some(1), counts(1, 1, 1), &[AVAILABLE_TRUE]),
        None,
        &time(0),
    );
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["observedGeneration"], 2);
    assert_eq!(json["availableReplicas"], 1);
    assert_eq!(json["conditions"][1]["type"], "Progressing");
    assert_eq!(json["conditions"][1]["status"], "False");
    assert_eq!(
        json["conditions"][1]["lastTransitionTime"],
        "1970-01-01T00:00:00Z"
    );
}

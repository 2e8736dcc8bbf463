//! The demo operator: a `WorkerPool` runs its workers as a Deployment of
//! the same name, and reports in its status how that Deployment's rollout
//! is going.
//!
//! [`workerpool`] declares the resource, [`deployment`] turns one into the
//! Deployment it owns, [`status`] reads a Deployment back into the
//! WorkerPool's status, and [`controller`] runs the loop that keeps both
//! in step; [`leader`] runs it only while this instance holds the Lease.
//! The binary only connects and waits for a signal.

pub mod controller;
pub mod deployment;
pub mod leader;
pub mod status;
pub mod workerpool;

pub use controller::{Error, run};
pub use workerpool::{WorkerPool, WorkerPoolSpec, WorkerPoolStatus};

/// The field manager of every write the controller makes.
pub const FIELD_MANAGER: &str = "controller-manager";

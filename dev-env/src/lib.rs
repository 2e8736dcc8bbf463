//! The Kubernetes inner dev loop as a library: the declared environment
//! (`config`), the Docker objects that realise it, the registry, the
//! cluster, images, rollouts and waits. The `xtask` binary is a thin command
//! line over this crate.

pub mod config;
pub mod docker;
pub mod image;
pub mod manifest;
pub mod plan;
pub mod registry;
pub mod state;

//! `kube-sim`: a Kubernetes API simulator that real clients (kubectl, kube-rs) accept.
//!
//! The crate is an API server over an in-memory [`store::Store`]. Controllers and a kubelet stand-in run in
//! the same process on top of the store's Rust API (see the [`store`] module docs).

pub mod controller;
pub mod defaults;
pub mod fieldmanager;
pub mod kubelet;
pub mod meta;
pub mod patch;
pub mod resource;
pub mod schema;
pub mod selector;
pub mod store;

pub use resource::{GroupResource, ResourceInfo};
pub use store::Store;

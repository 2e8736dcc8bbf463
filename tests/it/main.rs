//! Integration tests of the workspace, one binary. Tests that need Docker
//! or the distribution registry fail loudly when those are missing.

mod adopt;
mod deliver;
mod faults;
mod image;
mod init;
mod k3s_node;
mod lifecycle;
mod operator;
mod platform;
mod prune;
mod reach;
mod registry;
mod registry_auth;
mod targets;
mod tidy;
mod trust;
mod watch;

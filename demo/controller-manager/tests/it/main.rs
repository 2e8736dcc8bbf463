//! Integration tests of the controller-manager: its manifests, and the
//! controller running in-process against kube-sim.

mod manifests;
mod sim;

//! `cargo xtask watch`: the loop that turns by itself ([`run`]), and what
//! each component is built from ([`inputs`]), so that a saved file rebuilds
//! exactly the components it feeds.

pub mod inputs;
mod session;

pub use session::{DEBOUNCE, Error, WatchOptions, run};
